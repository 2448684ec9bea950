import { randomUUID } from "node:crypto";
import { create, type DescMethod, toBinary } from "@bufbuild/protobuf";
import { type Client, status } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { OnboardingService } from "../../gen/receipts/v1/onboarding_pb.js";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { hashPan, receiptBody } from "../support/harness.js";
import {
  HOSTILE_PRIVATE_KEYS,
  HOSTILE_PUBLIC_KEYS,
  HOSTILE_SIGNING_KEYS,
  type HostileKey,
} from "../support/hostile-keys.js";
import { type ServerProcess, startServerProcess } from "../support/server-process.js";
import { grpcTyped, REQUEST_TIMEOUT_MS, rawGrpcClient, rpcPath, UNLIMITED_TIERS } from "./support.js";

/**
 * Issue 31, item 1, from the attacker's side: the hostile key corpus sent to every endpoint that
 * takes a key (register, issuer escrow keys, merchant signing keys, both decrypt endpoints) over
 * every surface (REST, gRPC, Connect, gRPC-Web), at the service as `npm start` runs it, in its own
 * process. Each key must get 400 / INVALID_ARGUMENT `invalid_request`, and the process must still be
 * running after each one. On Node 20 before the keys were checked by our own code, the first key of
 * the corpus (a P-256 point at infinity) killed the process with SIGABRT.
 */

type Surface = "rest" | "grpc" | "connect" | "grpc-web";
const SURFACES: readonly Surface[] = ["rest", "grpc", "connect", "grpc-web"];

/** One endpoint that takes a key: its RPC, REST path, the key's field, and a valid request around it. */
interface KeyEndpoint {
  method: DescMethod;
  path: string;
  field: "publicKey" | "privateKey";
  role: "issuer" | "merchant";
  keys: readonly HostileKey[];
  body: () => Record<string, unknown>;
}

describe("hostile keys at a running service: always invalid_request, never a dead process", () => {
  let svc: ServerProcess;
  let grpc: Client;
  const answered: Record<Surface, number> = { rest: 0, grpc: 0, connect: 0, "grpc-web": 0 };
  let endpoints: KeyEndpoint[];

  const keyOf = (role: "issuer" | "merchant") => (role === "issuer" ? svc.issuerKey : svc.merchantKey);

  async function postJson(path: string, key: string, body: unknown) {
    const res = await fetch(`${svc.baseUrl}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": key },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    return { status: res.status, body: (await res.json()) as { data?: Record<string, string> } };
  }

  beforeAll(async () => {
    svc = await startServerProcess({ RATE_LIMIT_TIERS: UNLIMITED_TIERS, LOG_LEVEL: "warn" });
    grpc = rawGrpcClient(svc.port);
    // A cardholder with a stored receipt, a payment and a live grant: decrypt checks the grant before
    // it reads the private key, so the key must get past it to reach the parser.
    const keys = await postJson("/api/v1/onboarding/generate-keys", svc.issuerKey, {});
    const { keyId, publicKey } = keys.body.data as Record<string, string>;
    const hashedPan = hashPan("4111111111111111");
    const reg = await postJson("/api/v1/onboarding/register", svc.issuerKey, { hashedPan, publicKey, keyId });
    const userId = reg.body.data?.userId as string;
    const receipt = receiptBody({ recipientHashedPan: hashedPan });
    expect((await postJson("/api/v1/receipts/encrypt", svc.merchantKey, receipt)).status).toBe(200);
    const payment = await postJson("/api/v1/payments/gateway_a/create", svc.merchantKey, {
      ...receiptBody({ recipientHashedPan: hashedPan }),
      amount: 950,
    });
    const grant = await postJson("/api/v1/keys/grant-access", svc.issuerKey, { userId, keyId });
    const tokenId = grant.body.data?.tokenId as string;
    expect(tokenId).toMatch(/^tok_/);
    endpoints = [
      {
        method: OnboardingService.method.register,
        path: "/api/v1/onboarding/register",
        field: "publicKey",
        role: "issuer",
        keys: HOSTILE_PUBLIC_KEYS,
        body: () => ({ hashedPan: hashPan("4000000000000002"), keyId: randomUUID() }),
      },
      {
        method: KeysService.method.registerEscrowKey,
        path: "/api/v1/issuers/escrow-keys",
        field: "publicKey",
        role: "issuer",
        keys: HOSTILE_PUBLIC_KEYS,
        body: () => ({}),
      },
      {
        method: ReceiptsService.method.registerSigningKey,
        path: "/api/v1/receipts/signing-keys",
        field: "publicKey",
        role: "merchant",
        keys: HOSTILE_SIGNING_KEYS,
        body: () => ({ merchantId: "merchant-hostile-keys" }),
      },
      {
        method: ReceiptsService.method.decryptReceipt,
        path: "/api/v1/receipts/decrypt",
        field: "privateKey",
        role: "issuer",
        keys: HOSTILE_PRIVATE_KEYS,
        body: () => ({ receiptId: receipt.receiptId, tokenId }),
      },
      {
        method: PaymentsService.method.decryptPayment,
        path: "/api/v1/payments/decrypt",
        field: "privateKey",
        role: "issuer",
        keys: HOSTILE_PRIVATE_KEYS,
        body: () => ({ paymentId: payment.body.data?.paymentId, tokenId }),
      },
    ];
    // Building dist/ when a source changed, starting the service, a real RSA key generation.
  }, 120_000);

  afterAll(async () => {
    console.log(`hardening: hostile keys answered per surface ${JSON.stringify(answered)}`);
    grpc?.close();
    await svc?.stop();
  });

  /** Sends one key to one endpoint over one surface; asserts invalid_request and a live process. */
  async function attack(surface: Surface, endpoint: KeyEndpoint, key: HostileKey): Promise<void> {
    const label = `${surface} ${endpoint.method.name} ${key.label}`;
    const body = { ...endpoint.body(), [endpoint.field]: key.text };
    const apiKey = keyOf(endpoint.role);
    let refused: { ok: boolean; detail: string };
    try {
      refused = await send(surface, endpoint, body, apiKey);
    } catch (error) {
      refused = { ok: false, detail: `no answer: ${(error as Error).message}` };
      // A connection cut by a dying process: give its exit a moment to be seen.
      await svc.exitedWithin(1_000);
    }
    expect(svc.alive(), `${label}: the service died ${JSON.stringify(svc.ended())}`).toBe(true);
    expect(refused.ok, `${label}: ${refused.detail}`).toBe(true);
    answered[surface] += 1;
  }

  /** One call; `ok` when it was refused as invalid_request in that surface's terms. */
  async function send(
    surface: Surface,
    endpoint: KeyEndpoint,
    body: Record<string, unknown>,
    apiKey: string,
  ): Promise<{ ok: boolean; detail: string }> {
    if (surface === "rest") {
      const res = await postJson(endpoint.path, apiKey, body);
      const error = (res.body as { error?: { code?: string; details?: string } }).error;
      const ok =
        res.status === 400 && error?.code === "invalid_request" && error.details?.startsWith(endpoint.field);
      return { ok: ok === true, detail: `${res.status} ${JSON.stringify(res.body).slice(0, 300)}` };
    }
    if (surface === "grpc") {
      const outcome = await grpcTyped(grpc, endpoint.method, body, { "x-api-key": apiKey });
      const details = Buffer.from(outcome.metadata?.get("grpc-status-details-bin")[0] ?? "").toString(
        "latin1",
      );
      const ok = outcome.code === status.INVALID_ARGUMENT && details.includes("invalid_request");
      return { ok, detail: `${status[outcome.code]} ${outcome.details}` };
    }
    const message = create(endpoint.method.input, body as never);
    if (surface === "connect") {
      const res = await fetch(`${svc.baseUrl}${rpcPath(endpoint.method)}`, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-api-key": apiKey },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
      const text = await res.text();
      return {
        ok: res.status === 400 && text.includes('"invalid_argument"'),
        detail: `${res.status} ${text.slice(0, 300)}`,
      };
    }
    const payload = toBinary(endpoint.method.input, message);
    const frame = Buffer.concat([Buffer.from([0]), Buffer.alloc(4), payload]);
    frame.writeUInt32BE(payload.length, 1);
    const res = await fetch(`${svc.baseUrl}${rpcPath(endpoint.method)}`, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+proto", "x-api-key": apiKey },
      body: frame,
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    const text = Buffer.from(await res.arrayBuffer()).toString("latin1");
    return {
      ok: res.status === 200 && /grpc-status: ?3\r\n/.test(text),
      detail: `${res.status} ${text.slice(-200)}`,
    };
  }

  for (const surface of SURFACES) {
    it(`refuses every hostile key over ${surface} at every endpoint that takes a key`, async () => {
      for (const endpoint of endpoints) {
        for (const key of endpoint.keys) await attack(surface, endpoint, key);
      }
    });
  }

  it("is still up and serving afterwards, and sent each surface the whole corpus", async () => {
    const health = await fetch(`${svc.baseUrl}/healthz`);
    expect(health.status).toBe(200);
    expect(svc.alive()).toBe(true);
    const perSurface = endpoints.reduce((sum, endpoint) => sum + endpoint.keys.length, 0);
    expect(answered).toEqual({
      rest: perSurface,
      grpc: perSurface,
      connect: perSurface,
      "grpc-web": perSurface,
    });
    expect(svc.output()).not.toMatch(/"level":50/);
  });
});
