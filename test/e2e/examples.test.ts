import type { DescField, DescMessage, JsonObject, JsonValue } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { httpBindings } from "../../src/http/bindings.js";
import { isRequiredField } from "../../src/openapi/comments.js";
import { rpcName } from "../../src/openapi/extras.js";
import { openApiPath, serviceOpenApi } from "../../src/openapi/openapi.js";
import { API_SERVICES } from "../../src/rpc/policy.js";
import { startService, type TestService } from "../support/harness.js";

/**
 * The examples of the API reference, sent as they are shown to a running service, in the order a
 * developer would try them: each must succeed. Ids the service makes up (a userId, a tokenId, a
 * paymentId) differ from the example's; a later example gets the value the service gave instead.
 *
 * The same run checks two promises of the reference against the service: an operation documented
 * with `Idempotency-Key` answers a retry with the first response and `Idempotent-Replayed: true`
 * (and an operation documented without it never does), and a request field marked `x-required`
 * (its proto comment begins with `Required.`) left out is `invalid_request` naming it.
 */

/** The RPCs in the order their examples run; a new RPC must be placed here (the first test says so). */
const STORY = [
  "receipts.v1.OnboardingService/GenerateKeys",
  "receipts.v1.OnboardingService/Register",
  "receipts.v1.KeysService/LookupKey",
  "receipts.v1.KeysService/KtSelfCheck",
  "receipts.v1.ReceiptsService/EncryptReceipt",
  "receipts.v1.PaymentsService/CreatePayment",
  "receipts.v1.KeysService/GrantAccess",
  "receipts.v1.ReceiptsService/DecryptReceipt",
  "receipts.v1.PaymentsService/DecryptPayment",
  // Before the merchantId's receipts must be signed: the refund has a receipt of its own.
  "receipts.v1.PaymentsService/RefundPayment",
  "receipts.v1.PaymentsService/GetPayment",
  "receipts.v1.PaymentsService/ListPayments",
  "receipts.v1.ReceiptsService/ListReceipts",
  "receipts.v1.ReceiptsService/GetTransactionReceipt",
  "receipts.v1.ReceiptsService/StoreSealedReceipt",
  "receipts.v1.KeysService/RegisterEscrowKey",
  "receipts.v1.KeysService/ListEscrowKeys",
  "receipts.v1.ReceiptsService/ListPendingEscrow",
  "receipts.v1.ReceiptsService/ReleaseEscrow",
  "receipts.v1.KeysService/RevokeEscrowKey",
  "receipts.v1.WebhooksService/CreateWebhookEndpoint",
  "receipts.v1.WebhooksService/ListWebhookEndpoints",
  "receipts.v1.EventsService/ListEvents",
  "receipts.v1.WebhooksService/ListWebhookDeliveries",
  "receipts.v1.WebhooksService/ReplayWebhookEvent",
  "receipts.v1.WebhooksService/RotateWebhookSecret",
  "receipts.v1.WebhooksService/DeleteWebhookEndpoint",
  // After every receipt of the merchantId: from now on they must be signed.
  "receipts.v1.ReceiptsService/RegisterSigningKey",
  "receipts.v1.ReceiptsService/ListSigningKeys",
  "receipts.v1.ReceiptsService/RevokeSigningKey",
  "receipts.v1.KeysService/ListAuditEvents",
  "receipts.v1.KeysService/ListKtEntries",
  "receipts.v1.KeysService/RegisterIssuerSigningKey",
  "receipts.v1.KeysService/ListIssuerSigningKeys",
  "receipts.v1.OnboardingService/DeleteUser",
];

/**
 * Documented RPCs the story cannot run as shown: revoking a signer needs a statement signed by the
 * tenant's confirmed root about a signer that root added (test/domain/kt/bindings.test.ts runs it).
 */
const OUTSIDE_STORY = ["receipts.v1.KeysService/RevokeIssuerSigningKey"];

const doc = serviceOpenApi();

interface Example {
  rpc: string;
  verb: string;
  template: string;
  roles: string[];
  idempotent: boolean;
  path: Record<string, JsonValue>;
  query: Record<string, JsonValue>;
  body: JsonValue | undefined;
  response: JsonValue | undefined;
}

function mediaExample(container: unknown): JsonValue | undefined {
  const content = (container as JsonObject | undefined)?.content as JsonObject | undefined;
  return (content?.["application/json"] as JsonObject | undefined)?.example;
}

/** The first REST operation of each RPC, with the example as the reference shows it. */
const EXAMPLES = new Map<string, Example>();
for (const [template, item] of Object.entries(doc.paths)) {
  for (const [verb, value] of Object.entries(item)) {
    const op = value as JsonObject;
    const rpc = op["x-rpc"];
    if (typeof rpc !== "string" || EXAMPLES.has(rpc)) continue;
    const parameters = op.parameters as JsonObject[];
    const valuesIn = (where: string) =>
      Object.fromEntries(
        parameters.filter((p) => p.in === where && p.example !== undefined).map((p) => [p.name, p.example]),
      ) as Record<string, JsonValue>;
    const headers = parameters.map((p) => String(p.$ref ?? ""));
    EXAMPLES.set(rpc, {
      rpc,
      verb,
      template,
      roles: op["x-roles"] as string[],
      idempotent: headers.includes("#/components/parameters/IdempotencyKey"),
      path: valuesIn("path"),
      query: valuesIn("query"),
      body: mediaExample(op.requestBody),
      response: (mediaExample((op.responses as JsonObject)["200"]) as JsonObject | undefined)?.data,
    });
  }
}

/** Replaces every string the service made up differently, wherever it appears in `value`. */
function substitute(value: JsonValue | undefined, ids: ReadonlyMap<string, string>): JsonValue | undefined {
  if (typeof value === "string") return ids.get(value) ?? value;
  if (Array.isArray(value)) return value.map((v) => substitute(v, ids) ?? null);
  if (typeof value !== "object" || value === null) return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substitute(v, ids) ?? null]));
}

/** Records each string of the example response that the live response has different. */
function learn(example: JsonValue | undefined, live: JsonValue | undefined, ids: Map<string, string>): void {
  if (typeof example === "string" && typeof live === "string" && example !== live) ids.set(example, live);
  if (typeof example !== "object" || example === null || typeof live !== "object" || live === null) return;
  for (const [key, value] of Object.entries(example)) {
    learn(value, (live as Record<string, JsonValue>)[key as never], ids);
  }
}

interface Answer {
  status: number;
  headers: Headers;
  body: { success: boolean; data?: JsonValue; error?: { code: string; details: string } };
}

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(async () => {
  await svc?.close();
});

async function send(
  example: Example,
  ids: ReadonlyMap<string, string>,
  body: JsonValue | undefined,
  headers: Record<string, string> = {},
): Promise<Answer> {
  let url = example.template;
  for (const [name, value] of Object.entries(example.path)) {
    url = url.replace(`{${name}}`, encodeURIComponent(String(substitute(value, ids))));
  }
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(example.query)) query.set(name, String(substitute(value, ids)));
  const key = example.roles[0] === "issuer" ? svc.issuerKey : svc.merchantKey;
  const init: RequestInit = { method: example.verb.toUpperCase(), headers: { "x-api-key": key, ...headers } };
  if (body !== undefined) {
    init.body = JSON.stringify(substitute(body, ids));
    init.headers = { ...init.headers, "content-type": "application/json" };
  }
  const res = await fetch(`${svc.baseUrl}${url}${query.size > 0 ? `?${query}` : ""}`, init);
  return { status: res.status, headers: res.headers, body: (await res.json()) as Answer["body"] };
}

describe("the reference's examples against a running service", () => {
  it("has every documented RPC in the story, once", () => {
    expect([...STORY, ...OUTSIDE_STORY].sort()).toEqual([...EXAMPLES.keys()].sort());
    // Every RPC with a REST operation (WatchEvents streams over gRPC and Connect only).
    expect(
      httpBindings(API_SERVICES).filter((b, i, all) => all.findIndex((x) => x.method === b.method) === i),
    ).toHaveLength(STORY.length + OUTSIDE_STORY.length);
  });

  it("runs each example as shown; Idempotency-Key replays exactly where documented", async () => {
    const ids = new Map<string, string>();
    let required = 0;
    for (const rpc of STORY) {
      const example = EXAMPLES.get(rpc);
      if (example === undefined) throw new Error(`${rpc} has no example`);
      // Each field marked x-required left out, where the example itself would pass: invalid_request.
      for (const path of requiredPaths(example)) {
        const answer = await send(example, ids, withoutPath(example.body as JsonValue, path));
        expect(answer.status, `${rpc} without ${path}: ${JSON.stringify(answer.body)}`).toBe(400);
        expect(answer.body.error?.code).toBe("invalid_request");
        expect(answer.body.error?.details, `${rpc} without ${path}`).toContain(path);
        required += 1;
      }
      const key = { "idempotency-key": crypto.randomUUID() };
      const first = await send(example, ids, example.body, key);
      expect(first.status, `${rpc}: ${JSON.stringify(first.body)}`).toBe(200);
      expect(first.headers.get("idempotent-replayed"), rpc).toBeNull();
      learn(example.response, first.body.data, ids);
      const retry = await send(example, ids, example.body, key);
      if (example.idempotent) {
        expect(retry.status, rpc).toBe(200);
        expect(retry.headers.get("idempotent-replayed"), rpc).toBe("true");
        expect(retry.body.data, rpc).toEqual(first.body.data);
      } else {
        expect(retry.headers.get("idempotent-replayed"), `${rpc} is not documented as idempotent`).toBeNull();
      }
    }
    expect(required, "request fields marked x-required").toBeGreaterThan(20);
  });
});

/**
 * JSON paths (`keyBundle`, `receipts[0].merchantId`) of the REQUIRED fields an example's body sets.
 * Only the body: a path parameter left out is another URL.
 */
function requiredPaths(example: Example): string[] {
  const binding = httpBindings(API_SERVICES).find(
    (b) => rpcName(b.method) === example.rpc && openApiPath(b) === example.template,
  );
  if (binding === undefined || example.body === undefined) return [];
  const body = binding.body.kind === "field" ? binding.body.field.message : binding.method.input;
  return body === undefined ? [] : pathsIn(body, example.body, "");
}

function pathsIn(message: DescMessage, value: JsonValue | undefined, prefix: string): string[] {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return [];
  const paths: string[] = [];
  for (const field of message.fields as DescField[]) {
    const member = value[field.jsonName];
    if (member === undefined) continue;
    const path = `${prefix}${field.jsonName}`;
    if (isRequiredField(field)) paths.push(path);
    if (field.fieldKind === "message") paths.push(...pathsIn(field.message, member, `${path}.`));
    if (field.fieldKind === "list" && field.listKind === "message" && Array.isArray(member)) {
      paths.push(...pathsIn(field.message, member[0], `${path}[0].`));
    }
  }
  return paths;
}

/** A copy of `value` without the member at `path`. */
function withoutPath(value: JsonValue, path: string): JsonValue {
  const copy = structuredClone(value) as JsonObject;
  const parts = path.split(/\.|(?=\[)/);
  let node: JsonValue = copy;
  for (const part of parts.slice(0, -1)) {
    node = (part.startsWith("[") ? (node as JsonValue[])[0] : (node as JsonObject)[part]) as JsonValue;
  }
  delete (node as JsonObject)[parts.at(-1) as string];
  return copy;
}
