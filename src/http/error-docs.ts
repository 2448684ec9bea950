import { Code } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import { DECLINE_CODES } from "../domain/gateways/declines.js";
import { SANDBOX_NONCES } from "../domain/gateways/sandbox-b.js";
import { ERROR_DOCS_PATH, ERRORS, type ErrorCode } from "../errors.js";

/**
 * The page every error's `doc_url` points at (`/docs/errors#<code>`): one section per code of the
 * registry, with its HTTP status, gRPC code, meaning and whether a retry can help, plus the decline
 * codes and the sandbox's test cards under `payment_declined`. Made from the registries at start-up,
 * so the page, the envelope and the OpenAPI document cannot disagree. Like `/docs`, it needs no API
 * key and loads nothing from elsewhere.
 */

/** Serves the error page at {@link ERROR_DOCS_PATH}. */
export function registerErrorDocs(app: FastifyInstance): void {
  const page = errorDocsPage();
  app.get(ERROR_DOCS_PATH, async (_request, reply) => reply.type("text/html; charset=utf-8").send(page));
}

/** The page's HTML. */
export function errorDocsPage(): string {
  const sections = (Object.keys(ERRORS) as ErrorCode[]).map(section).join("\n");
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Errors - Receipt Encryption Service</title>
<style>
body { font: 16px/1.5 system-ui, sans-serif; max-width: 48rem; margin: 2rem auto; padding: 0 1rem; color: #1a1a1a; }
section { border-top: 1px solid #ddd; padding-top: 0.5rem; }
section:target { background: #fff8dc; }
code { font: 0.9em ui-monospace, monospace; background: #f3f3f3; padding: 0 0.2em; }
table { border-collapse: collapse; } th, td { text-align: left; padding: 0.2rem 0.8rem 0.2rem 0; }
</style>
</head>
<body>
<h1>Errors</h1>
<p>Every error of the REST surface is <code>{"success": false, "error": {...}}</code> with <code>code</code>,
<code>message</code>, <code>details</code>, <code>timestamp</code>, <code>request_id</code> and
<code>doc_url</code>, a link to the code's section below. gRPC and Connect errors carry the code as the
reason of a <code>google.rpc.ErrorInfo</code> (domain <code>receipts.v1</code>) whose metadata holds
<code>doc_url</code> and the facts of the error (<code>decline_code</code>, <code>payment_id</code>).
Quote the <code>request_id</code> when you ask for help.</p>
${sections}
</body>
</html>
`;
}

/** One code's section. */
function section(code: ErrorCode): string {
  const entry = ERRORS[code];
  return `<section id="${code}">
<h2><code>${code}</code></h2>
<p>HTTP ${entry.http} &middot; gRPC <code>${grpcName(entry.grpc)}</code></p>
<p>${html(entry.description)}</p>
<p>${retryAdvice(entry.http)}</p>
${EXTRA[code] ?? ""}</section>`;
}

/** Whether a retry can help, by the client library's rules (retried: 429, 500, 502, 503, 504). */
function retryAdvice(status: number): string {
  return status === 429 || status >= 500
    ? "Retry with backoff, after <code>Retry-After</code> seconds when it is given; with the same Idempotency-Key for a create."
    : "Do not retry the same request: change what the message and details name first.";
}

/** A Connect code as gRPC spells it: `Code.InvalidArgument` is `INVALID_ARGUMENT`. */
function grpcName(code: Code): string {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

function html(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

/** What some codes say beyond the registry's description. */
const EXTRA: Partial<Record<ErrorCode, string>> = {
  conflict: `<p>A payment sent again for the same <code>merchantId</code> and <code>transactionId</code>
without an Idempotency-Key names the payment that already exists: <code>payment_id</code> in the error
(and in its message). Send an Idempotency-Key with every create, and a retry gets the first response
with <code>Idempotent-Replayed: true</code> instead.</p>`,
  payment_declined: `<p><code>decline_code</code> in the error says why:</p>
<table><tr><th>decline_code</th><th>reason</th><th>what to do</th></tr>
${Object.entries(DECLINE_CODES)
  .map(
    ([code, d]) =>
      `<tr><td id="decline-${code}"><code>${code}</code></td><td>${html(d.reason)}</td><td>${html(d.action)}</td></tr>`,
  )
  .join("\n")}
</table>
<p>The <code>gateway_b</code> sandbox decides the outcome by the <code>cardNonce</code> (none is
approved); the <code>gateway_a</code> sandbox approves every charge.</p>
<table><tr><th>cardNonce</th><th>outcome</th></tr>
${Object.entries(SANDBOX_NONCES)
  .map(([nonce, outcome]) => `<tr><td><code>${nonce}</code></td><td><code>${outcome}</code></td></tr>`)
  .join("\n")}
</table>`,
};
