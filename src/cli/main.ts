import { ConfigError } from "../config.js";
import {
  CommandConfigError,
  keysCommand,
  OPERATOR_HELP,
  ownershipCommand,
  parse,
  UsageError,
} from "./admin-commands.js";
import { DemoError, runDemo } from "./demo.js";
import { KT_HELP, ktCommand, witnessCommand } from "./kt-commands.js";
import { ktMonitorCommand, MONITOR_HELP } from "./kt-monitor-command.js";
import { OPERATOR_API_OFF, OperatorError } from "./operator.js";
import { WEBHOOKS_HELP, webhooksCommand } from "./webhooks.js";

/** The command groups that have their own --help. */
const GROUPS = new Set([
  "keys",
  "bins",
  "merchants",
  "cards",
  "audit",
  "escrow",
  "demo",
  "kt",
  "witness",
  "webhooks",
]);

/** Exit codes scripts can rely on. */
export const EXIT = { ok: 0, failure: 1, usage: 2, config: 78 } as const;

const HELP = {
  root: `Usage: receipts <command> [options]

Commands:
  keys create       Create an API key (printed once)
  keys list         List API keys (hashes never shown)
  keys revoke       Revoke an API key by id
  bins set|get      Set or show the BIN prefixes an issuer tenant owns
  merchants assign  Give a merchantId to a merchant tenant
  cards transfer    Move a card registered by the wrong issuer to another issuer tenant
  audit             Read the audit log
  escrow            Count escrowed receipts by owner and key
  webhooks          A tenant's webhook endpoints, deliveries and events, with its API key
  demo              Run the five steps plus escrow against a running server, printing each call
  kt keygen         Make the key log's signing key (KT_LOG_PRIVATE_KEY_FILE) and print its vkey
  kt monitor        One run of an issuer's key-log monitor (exit 3 and one line per alert)
  witness keygen    Make a witness key and print its vkey
  witness serve     Run a witness of the key log (C2SP tlog-witness), as a bank may

Every command takes --json: its result as JSON on stdout, and a failure as {"error": {"code",
"message"}} on stderr, with the same exit codes.

Run "receipts <command> --help" for a command's options. Operator commands work on a running server
with --url <url> (its ADMIN_TOKEN in the environment), or else on the store configured by the
environment (STORE, MONGODB_URI, MONGODB_DB, RECEIPTS_ENV), as for the server.`,
  ...OPERATOR_HELP,
  ...KT_HELP,
  demo: `Usage: receipts demo [--url <url>] [--issuer-key <key>] [--merchant-key <key>] [--json]

Runs the five steps of the flow (generate keys, register, create payment, grant, decrypt) and escrow
(encrypt for an unregistered card, register it, list) against a running server over REST, printing
each request and response with private keys, tokens and client secrets masked. Every run uses fresh
test card numbers and ids, so it can be repeated against the same server.

Options (or environment):
  --url <url>              the server (RECEIPTS_URL; default http://localhost:$PORT, PORT from the
                           environment as for the server, else 8080)
  --issuer-key <key>       an issuer API key (RECEIPTS_ISSUER_KEY)
  --merchant-key <key>     a merchant API key (RECEIPTS_MERCHANT_KEY)
  --json                   print one JSON document at the end: every step's request and response
                           (secrets masked) and the result
  -h, --help               this help
With the embedded store, use the two keys npm start prints.`,
};

/** Runs the command line with `argv` (without node and script); returns the exit code. */
export async function runCli(
  argv: string[],
  out: NodeJS.WritableStream = process.stdout,
  err: NodeJS.WritableStream = process.stderr,
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  const [group, command, ...rest] = argv;
  const wantsHelp = argv.includes("--help") || argv.includes("-h");
  try {
    if (group === "demo") {
      if (wantsHelp) {
        out.write(`${HELP.demo}\n`);
        return EXIT.ok;
      }
      return await demo(argv.slice(1), out, env);
    }
    if (group === undefined || (!GROUPS.has(group) && wantsHelp)) {
      out.write(`${HELP.root}\n`);
      return group === undefined ? EXIT.usage : EXIT.ok;
    }
    if (group === "webhooks") {
      if (wantsHelp) {
        out.write(`${WEBHOOKS_HELP}\n`);
        return EXIT.ok;
      }
      await webhooksCommand(argv.slice(1), out, env, defaultDemoUrl(env));
      return EXIT.ok;
    }
    if (group === "keys") {
      if (wantsHelp) {
        const help =
          command === "create" || command === "list" || command === "revoke" ? HELP[command] : HELP.root;
        out.write(`${help}\n`);
        return EXIT.ok;
      }
      await keysCommand(command, rest, out);
      return EXIT.ok;
    }
    if (group === "kt" && command === "monitor") {
      if (wantsHelp) {
        out.write(`${MONITOR_HELP}\n`);
        return EXIT.ok;
      }
      return await ktMonitorCommand(rest, out, env);
    }
    if (group === "kt" || group === "witness") {
      if (wantsHelp) {
        out.write(`${HELP[group]}\n`);
        return EXIT.ok;
      }
      await (group === "kt" ? ktCommand : witnessCommand)(command, rest, out);
      return EXIT.ok;
    }
    if (
      group === "bins" ||
      group === "merchants" ||
      group === "cards" ||
      group === "audit" ||
      group === "escrow"
    ) {
      if (wantsHelp) {
        out.write(`${HELP[group]}\n`);
        return EXIT.ok;
      }
      await ownershipCommand(group, argv.slice(1), out);
      return EXIT.ok;
    }
    throw new UsageError(`Unknown command "${group}".`);
  } catch (e) {
    return reportFailure(e, err, argv.includes("--json"));
  }
}

/**
 * Writes why a command failed to `err` and returns its exit code. With `--json` the report is one
 * JSON object, `{"error": {"code", "message"}}`: the service's error code when the server gave one,
 * else `usage`, `configuration`, `demo_failed` or `failed`.
 */
function reportFailure(e: unknown, err: NodeJS.WritableStream, json: boolean): number {
  const [exit, code, message, hint] = classify(e);
  if (json) err.write(`${JSON.stringify({ error: { code, message } })}\n`);
  else err.write(`${hint === undefined ? message : `${message}\n${hint}`}\n`);
  return exit;
}

/** The exit code, error code, message and (text only) hint of a failure. */
function classify(e: unknown): [number, string, string, string?] {
  if (e instanceof UsageError) return [EXIT.usage, "usage", e.message, 'Run "receipts --help" for usage.'];
  if (e instanceof DemoError) return [EXIT.failure, "demo_failed", `Demo failed: ${e.message}`];
  if (
    e instanceof ConfigError ||
    e instanceof CommandConfigError ||
    (e instanceof OperatorError && e.code === OPERATOR_API_OFF)
  ) {
    return [EXIT.config, e instanceof OperatorError ? e.code : "configuration", e.message];
  }
  if (e instanceof OperatorError) return [EXIT.failure, e.code, `Failed: ${e.message}`];
  return [EXIT.failure, "failed", `Failed: ${e instanceof Error ? e.message : String(e)}`];
}

/**
 * The server `demo` talks to unless told otherwise (`--url`, `RECEIPTS_URL`): this machine, on the
 * port the server itself would take from the same environment (8080 unless `PORT` is set).
 */
export function defaultDemoUrl(env: NodeJS.ProcessEnv): string {
  const port = env.PORT?.trim() || "8080";
  return `http://localhost:${port}`;
}

async function demo(args: string[], out: NodeJS.WritableStream, env: NodeJS.ProcessEnv): Promise<number> {
  const fallback = defaultDemoUrl(env);
  const { values } = parse(args, {
    url: { type: "string", default: env.RECEIPTS_URL || fallback },
    "issuer-key": { type: "string", default: env.RECEIPTS_ISSUER_KEY ?? "" },
    "merchant-key": { type: "string", default: env.RECEIPTS_MERCHANT_KEY ?? "" },
    json: { type: "boolean", default: false },
  });
  const urlSource = args.some((arg) => arg === "--url" || arg.startsWith("--url="))
    ? "--url"
    : env.RECEIPTS_URL
      ? "RECEIPTS_URL"
      : `the default, from ${env.PORT?.trim() ? "PORT" : "no PORT set"}`;
  const issuerKey = String(values["issuer-key"]);
  const merchantKey = String(values["merchant-key"]);
  if (!issuerKey || !merchantKey) {
    throw new UsageError(
      "demo needs --issuer-key and --merchant-key (or RECEIPTS_ISSUER_KEY, RECEIPTS_MERCHANT_KEY).",
    );
  }
  await runDemo({ baseUrl: String(values.url), urlSource, issuerKey, merchantKey, out, json: values.json });
  return EXIT.ok;
}
