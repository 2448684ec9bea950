import { generateKeyPairSync } from "node:crypto";
import { create, type DescMethod, toBinary } from "@bufbuild/protobuf";
import { Client, credentials, Metadata, type ServiceError, status } from "@grpc/grpc-js";
import { expect } from "vitest";
import { ERRORS, type ErrorCode, isErrorCode } from "../../src/errors.js";
import { httpBindings } from "../../src/http/bindings.js";
import { API_SERVICES, rolesFor } from "../../src/rpc/policy.js";
import type { Role } from "../../src/store/types.js";
import {
  type Envelope,
  hashPan,
  post,
  type Reachable,
  receiptBody,
  type TestService,
} from "../support/harness.js";

/**
 * Shared pieces of the hardening tests: requests that can never hang (every one has a deadline),
 * assertions on what a client must always get back, a raw gRPC caller, and fast-check settings.
 */

/** Longest any single request may take before the test calls it a hang. */
export const REQUEST_TIMEOUT_MS = 10_000;

/** The role of an API key allowed to call `method` (the first, when several are). */
export function roleFor(method: DescMethod): Role {
  const roles = rolesFor(method);
  return roles === "public" ? "issuer" : (roles[0] ?? "issuer");
}

/**
 * Every unary RPC of the API, as `[method, role that may call it]`, read from the services and the role
 * table: an RPC added later is attacked too, with no change here. A server stream (WatchEvents) stays
 * open by design, so "every call ends with a status" does not hold for it; test/events/watch-hostile
 * attacks it the same ways, expecting a refusal or an open stream.
 */
export const RPCS: ReadonlyArray<readonly [DescMethod, Role]> = API_SERVICES.flatMap((service) =>
  service.methods
    .filter((method) => method.methodKind === "unary")
    .map((method) => [method, roleFor(method)] as const),
);

/** A REST endpoint, read from the protos' `google.api.http` bindings. */
export interface RestRoute {
  /** The RPC it calls, e.g. `EncryptReceipt`. */
  rpc: string;
  verb: string;
  /** The path template, e.g. `/api/v1/receipts/{user_id}`. */
  template: string;
  role: Role;
}

/** Every REST endpoint of the service: a route added to the protos is attacked too. */
export const REST_ROUTES: readonly RestRoute[] = httpBindings(API_SERVICES).map((binding) => ({
  rpc: binding.method.name,
  verb: binding.verb,
  template: binding.template,
  role: roleFor(binding.method),
}));

/** A template's path with every `{variable}` replaced by `values[variable]`, or by `fallback`. */
export function fillPath(template: string, values: Record<string, string>, fallback = "x"): string {
  return template.replace(/\{([^}]+)\}/g, (_, name: string) => values[name] ?? fallback);
}

/** The gRPC path of a method, `/receipts.v1.KeysService/GrantAccess`. */
export function rpcPath(method: DescMethod): string {
  return `/${method.parent.typeName}/${method.name}`;
}

/** An HTTP answer, read whole. */
export interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

/** Sends one HTTP/1.1 request with a deadline; `body` goes out byte for byte. */
export async function send(
  svc: Pick<TestService, "baseUrl">,
  method: string,
  path: string,
  options: { body?: string | Uint8Array; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const res = await fetch(`${svc.baseUrl}${path}`, {
    method,
    headers: options.headers ?? {},
    ...(options.body === undefined ? {} : { body: options.body }),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/**
 * Asserts what every refused REST request must get: a 4xx in the error envelope whose code maps to
 * that status, with the response's request id, and returns the error. `label` names the case.
 */
export function expectRestRefusal(answer: Answer, label: string): NonNullable<Envelope["error"]> {
  expect(answer.status, `${label}: ${answer.text.slice(0, 300)}`).toBeGreaterThanOrEqual(400);
  expect(answer.status, `${label}: ${answer.text.slice(0, 300)}`).toBeLessThan(500);
  const body = JSON.parse(answer.text) as Envelope;
  expect(body.success, label).toBe(false);
  const code = body.error?.code ?? "";
  expect(isErrorCode(code), `${label}: code ${code}`).toBe(true);
  expect(ERRORS[code as ErrorCode].http, `${label}: status of ${code}`).toBe(answer.status);
  expect(body.error?.request_id, label).toBe(answer.headers.get("x-request-id"));
  return body.error as NonNullable<Envelope["error"]>;
}

/** gRPC statuses that would mean the server failed rather than the caller. */
export const SERVER_FAULTS: ReadonlySet<number> = new Set([
  status.INTERNAL,
  status.UNKNOWN,
  status.UNAVAILABLE,
  status.DEADLINE_EXCEEDED,
  status.DATA_LOSS,
  status.UNIMPLEMENTED,
]);

/** The outcome of a raw gRPC call: the status code (0 for OK), the response bytes or the error's metadata. */
export interface GrpcOutcome {
  code: number;
  details: string;
  metadata: Metadata | undefined;
  response: Buffer | undefined;
}

/** A grpc-js client that sends the request bytes as given: any method, any payload. */
export function rawGrpcClient(port: number): Client {
  return new Client(`127.0.0.1:${port}`, credentials.createInsecure(), {
    "grpc.max_send_message_length": 8 * 1024 * 1024,
  });
}

/** Calls `path` with `payload` as the request message bytes, with a deadline. */
export function grpcRaw(
  client: Client,
  path: string,
  payload: Uint8Array,
  headers: Record<string, string>,
): Promise<GrpcOutcome> {
  const metadata = new Metadata();
  for (const [name, value] of Object.entries(headers)) metadata.set(name, value);
  return new Promise((resolve) => {
    client.makeUnaryRequest<Uint8Array, Buffer>(
      path,
      (bytes) => Buffer.from(bytes),
      (bytes) => bytes,
      payload,
      metadata,
      { deadline: Date.now() + REQUEST_TIMEOUT_MS },
      (error: ServiceError | null, response?: Buffer) => {
        resolve({
          code: error ? error.code : status.OK,
          details: error?.details ?? "",
          metadata: error?.metadata,
          response,
        });
      },
    );
  });
}

/** Calls `method` over gRPC with a typed request (protobuf-es init shape) serialized to binary. */
export function grpcTyped(
  client: Client,
  method: DescMethod,
  init: Record<string, unknown>,
  headers: Record<string, string>,
): Promise<GrpcOutcome> {
  const bytes = toBinary(method.input, create(method.input, init));
  return grpcRaw(client, rpcPath(method), bytes, headers);
}

/** Sends a Connect unary request (`application/json` or `application/proto`) with a deadline. */
export function connectRaw(
  svc: Pick<TestService, "baseUrl">,
  method: DescMethod,
  body: string | Uint8Array,
  headers: Record<string, string>,
  contentType = "application/json",
): Promise<Answer> {
  return send(svc, "POST", rpcPath(method), {
    body,
    headers: { "content-type": contentType, "connect-protocol-version": "1", ...headers },
  });
}

/**
 * fast-check settings: a FIXED seed (so CI is deterministic) unless `FC_SEED` says otherwise
 * (`FC_SEED=random` picks one and prints it), and `defaultRuns` runs unless `FC_RUNS` says more.
 */
export function fuzzSettings(defaultRuns: number): { seed: number; numRuns: number } {
  const rawSeed = process.env.FC_SEED;
  const seed = rawSeed === "random" ? RANDOM_SEED : rawSeed ? Number(rawSeed) : FIXED_SEED;
  const runs = Number(process.env.FC_RUNS) || defaultRuns;
  return { seed, numRuns: runs };
}

/** The seed of every property in normal runs. */
export const FIXED_SEED = 20_261_121;

/**
 * The seed of every property of this process with `FC_SEED=random`: one per run, so the seed a
 * test prints replays all of its properties.
 */
const RANDOM_SEED = Date.now() % 2_147_483_647;

/** A registered cardholder: its key pair and user id. */
export interface Cardholder {
  hashedPan: string;
  userId: string;
  keyId: string;
  publicKey: string;
  privateKey: string;
}

/** Generates a key pair and registers it for card `pan` with `issuerKey` (the service's issuer by default). */
export async function onboard(svc: Reachable, pan: string, issuerKey = svc.issuerKey): Promise<Cardholder> {
  const keys = await post(svc, "/api/v1/onboarding/generate-keys", issuerKey, {});
  expect(keys.status).toBe(200);
  const hashedPan = hashPan(pan);
  const { keyId, publicKey, privateKey } = keys.body.data as Record<string, string>;
  const reg = await post(svc, "/api/v1/onboarding/register", issuerKey, { hashedPan, publicKey, keyId });
  expect(reg.status, JSON.stringify(reg.body)).toBe(200);
  return {
    hashedPan,
    userId: reg.body.data.userId,
    keyId: keyId ?? "",
    publicKey: publicKey ?? "",
    privateKey: privateKey ?? "",
  };
}

/** A decrypt grant for a cardholder; returns the token id. */
export async function grantFor(svc: Reachable, holder: Cardholder, issuerKey = svc.issuerKey) {
  const res = await post(svc, "/api/v1/keys/grant-access", issuerKey, {
    userId: holder.userId,
    keyId: holder.keyId,
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.data.tokenId as string;
}

/** Rate-limit tiers no test barrage can reach, so a 429 never hides what a request really gets. */
export const UNLIMITED_TIERS = JSON.stringify({
  sandbox: { requestsPerMinute: 1_000_000, generateKeysPerMinute: 1_000_000 },
  standard: { requestsPerMinute: 1_000_000, generateKeysPerMinute: 1_000_000 },
});

/** The error lines (level 50 and up) among captured pino log lines: every 5xx logs its cause there. */
export function errorLines(lines: readonly string[]): string[] {
  return lines.filter((line) => (JSON.parse(line) as { level: number }).level >= 50);
}

/** A valid Ed25519 public key, for a signing-key registration that could succeed. */
export const SIGNING_KEY = generateKeyPairSync("ed25519")
  .publicKey.export({ type: "spki", format: "der" })
  .toString("base64");

/** What the hostile-input suites aim at: a cardholder with a stored receipt, a payment and a live grant. */
export interface Targets {
  holder: Cardholder;
  receipt: Record<string, unknown>;
  paymentId: string;
  /** The receipt of the payment, which a refund receipt names as its original. */
  paymentReceiptId: string;
  tokenId: string;
}

/** Registers a cardholder, encrypts one receipt and pays one payment for it, and grants access. */
export async function seedTargets(svc: TestService): Promise<Targets> {
  const holder = await onboard(svc, "4111111111111111");
  const receipt = receiptBody({ recipientHashedPan: holder.hashedPan });
  expect((await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, receipt)).status).toBe(200);
  const paid = receiptBody({ recipientHashedPan: holder.hashedPan });
  const pay = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, { ...paid, amount: 950 });
  expect(pay.status).toBe(200);
  return {
    holder,
    receipt,
    paymentId: pay.body.data.paymentId,
    paymentReceiptId: paid.receiptId as string,
    tokenId: await grantFor(svc, holder),
  };
}
