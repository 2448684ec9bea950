import type { DescMethod } from "@bufbuild/protobuf";
import { type Client, status } from "@grpc/grpc-js";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Envelope, hashPan, receiptBody } from "../support/harness.js";
import { type ServerProcess, startServerProcess } from "../support/server-process.js";
import {
  adminRequestArb,
  anyJson,
  connectBodyArb,
  hostileKeyArb,
  type KeyKind,
  mutatedBody,
  receiptArb,
  rpcCallArb,
} from "./fuzz-inputs.js";
import {
  type Cardholder,
  connectRaw,
  expectRestRefusal,
  fuzzSettings,
  grantFor,
  grpcRaw,
  onboard,
  RPCS,
  rawGrpcClient,
  SERVER_FAULTS,
  SIGNING_KEY,
  send,
} from "./support.js";

/**
 * Property-based hostile input against the service as `npm start` runs it, in its own process:
 * fast-check generates bodies, fields, path segments, protobuf bytes, whole receipts, operator API
 * requests and keys (from the hostile key corpus, or valid and hostile keys damaged at random), over
 * REST, gRPC, Connect, gRPC-Web and /admin/v1. Every answer must be a well-formed 2xx or 4xx (gRPC:
 * not a server status) within the request deadline, no line of the service's log may be an error,
 * the process must be alive at the end and its resident memory must not have grown past a bound.
 * The seed is fixed unless `FC_SEED` says otherwise (a number, or `random`, as CI runs it); it is
 * printed, and `FC_SEED=<seed>` replays a run. `FC_RUNS` sets every property's count
 * (`npm run test:fuzz` for a longer run).
 */

/**
 * Inputs per surface in a normal run (`npm test`): at least 1,000 each for REST (split over the REST
 * properties), gRPC, Connect, gRPC-Web and the operator API. `FC_RUNS` sets every property's count.
 */
const RUNS = {
  restMutated: 450,
  restReceipts: 350,
  restGet: 200,
  grpc: 1_000,
  connect: 1_000,
  grpcWeb: 1_000,
  admin: 1_000,
} as const;

/**
 * How much the service's resident memory may grow over the run: a warm-up allowance, and a little
 * per input. The warm-up is what any busy run costs once: the young generation grows to 2 x 64 MB
 * (`--max-semi-space-size=64`, as `npm start` runs it), and the crypto workers' own heaps and the
 * allocator's per-thread arenas grow outside the main heap. Seen at the end of runs: main-thread heap
 * 183-195 MB total (new space 134, old 42-47), external 30-41 MB; RSS growth 116-173 MB on Node 20,
 * 153 on 22, 241-244 on 24 (whose native memory is larger). The per-input allowance bounds a leak:
 * 5,000 inputs at 16 KB are 78 MB; main's metric-label leak cost about 30 KB per invented method.
 */
const RSS_WARM_UP_MB = 256;
const RSS_PER_INPUT_KB = 16;

/** Building dist/ when a source changed, starting the service and a real RSA key generation, on a busy machine. */
const SETUP_TIMEOUT_MS = 120_000;

/** Method labels the service can have in /metrics: its RPCs (about 30), its routes, `unmatched`. */
const MAX_METHOD_LABELS_SEEN = 80;

/** The operator token of the fuzzed service: random, as the configuration requires. */
const ADMIN_TOKEN = `adm_${Buffer.from(crypto.getRandomValues(new Uint8Array(24))).toString("base64url")}`;

/**
 * Rate limits no barrage reaches, except key generation: each RSA-2048 key pair costs the machine
 * tens of milliseconds (seconds on a loaded one), and random inputs decode to a valid GenerateKeys
 * request often enough to make it most of the run. Two a minute (the set-up's, and the generator
 * reaching the real code); after that a GenerateKeys call gets 429, a well-formed refusal that costs
 * nothing. Every other call keeps its real answer.
 */
const FUZZ_TIERS = JSON.stringify({
  sandbox: { requestsPerMinute: 1_000_000, generateKeysPerMinute: 2 },
  standard: { requestsPerMinute: 1_000_000, generateKeysPerMinute: 2 },
});

/**
 * Time for each property: 1,000 requests to another process, 10-22 s alone on a shared two-core
 * machine, more beside the rest of the suite.
 */
const PROPERTY_TIMEOUT = { timeout: 180_000 };

describe("fuzzed input: 2xx or 4xx, never a 5xx, a hang or a dead process", PROPERTY_TIMEOUT, () => {
  let svc: ServerProcess;
  let grpc: Client;
  let holder: Cardholder;
  let valid: Record<string, { path: string; key: string; body: Record<string, unknown>; keyKind?: KeyKind }>;
  /** The valid body of each RPC that takes a key, by RPC name. */
  let validByRpc: Record<string, Record<string, unknown>>;
  let rssAtStart = 0;
  /** Inputs answered per surface. */
  const surfaces = { rest: 0, grpc: 0, connect: 0, "grpc-web": 0, admin: 0 };

  beforeAll(async () => {
    const seed = fuzzSettings(0).seed;
    console.log(
      `hardening: fuzz seed ${seed} (replay a failure with FC_SEED=${seed}; FC_SEED=random FC_RUNS=n for a longer run)`,
    );
    // Warnings and errors only: a server error logs its cause at level 50. The trusted proxy lets
    // the operator API's calls come from many addresses, so its own limit (per address) stays out
    // of the way of the run.
    svc = await startServerProcess({
      RATE_LIMIT_TIERS: FUZZ_TIERS,
      LOG_LEVEL: "warn",
      ADMIN_TOKEN,
      TRUSTED_PROXIES: "127.0.0.1",
    });
    grpc = rawGrpcClient(svc.port);
    holder = await onboard(svc, "4111111111111111");
    const receipt = receiptBody({ recipientHashedPan: holder.hashedPan });
    await send(svc, "POST", "/api/v1/receipts/encrypt", {
      body: JSON.stringify(receipt),
      headers: { "content-type": "application/json", "x-api-key": svc.merchantKey },
    });
    const tokenId = await grantFor(svc, holder);
    const credentials = { tokenId, privateKey: holder.privateKey };
    const register = {
      hashedPan: hashPan("4000000000000002"),
      publicKey: holder.publicKey,
      keyId: holder.keyId,
    };
    const signing = { merchantId: "merchant-signing-fuzz", publicKey: SIGNING_KEY };
    const decryptReceipt = { receiptId: receipt.receiptId, ...credentials };
    const decryptPayment = { paymentId: "pay_x", ...credentials };
    const escrow = { publicKey: holder.publicKey };
    validByRpc = {
      Register: register,
      RegisterSigningKey: signing,
      DecryptReceipt: decryptReceipt,
      DecryptPayment: decryptPayment,
      RegisterEscrowKey: escrow,
    };
    const issuer = svc.issuerKey;
    valid = {
      "generate-keys": { path: "/api/v1/onboarding/generate-keys", key: issuer, body: {} },
      register: { path: "/api/v1/onboarding/register", key: issuer, body: register, keyKind: "public" },
      "grant-access": {
        path: "/api/v1/keys/grant-access",
        key: issuer,
        body: { userId: holder.userId, keyId: holder.keyId },
      },
      encrypt: { path: "/api/v1/receipts/encrypt", key: svc.merchantKey, body: receipt },
      create: {
        path: "/api/v1/payments/gateway_a/create",
        key: svc.merchantKey,
        body: { ...receipt, amount: 950 },
      },
      "decrypt payment": {
        path: "/api/v1/payments/decrypt",
        key: issuer,
        body: decryptPayment,
        keyKind: "private",
      },
      "signing key": {
        path: "/api/v1/receipts/signing-keys",
        key: svc.merchantKey,
        body: signing,
        keyKind: "signing",
      },
      "decrypt receipt": {
        path: "/api/v1/receipts/decrypt",
        key: issuer,
        body: decryptReceipt,
        keyKind: "private",
      },
      "escrow key": { path: "/api/v1/issuers/escrow-keys", key: issuer, body: escrow, keyKind: "public" },
    };
    rssAtStart = await svc.rssMb();
  }, SETUP_TIMEOUT_MS);

  afterAll(async () => {
    const total = Object.values(surfaces).reduce((a, b) => a + b, 0);
    console.log(
      `hardening: ${total} fuzzed requests (seed ${fuzzSettings(0).seed}) answered without a server error`,
    );
    grpc?.close();
    await svc?.stop();
  });

  /** Asserts a REST (or operator API) answer is a success envelope or a refusal, and returns its body. */
  function expectWellFormed(
    answer: Awaited<ReturnType<typeof send>>,
    label: string,
    surface: "rest" | "admin" = "rest",
  ): Envelope {
    surfaces[surface] += 1;
    if (answer.status === 200) {
      const body = JSON.parse(answer.text) as Envelope;
      expect(body.success, label).toBe(true);
      return body;
    }
    expectRestRefusal(answer, label);
    return JSON.parse(answer.text) as Envelope;
  }

  it("answers every POST route with a mutated body well (fields set to anything or a hostile key, removed, or added)", async () => {
    const mutation = fc.oneof(
      fc.record({ kind: fc.constant("set" as const), field: fc.nat(), value: anyJson }),
      fc.record({ kind: fc.constant("add" as const), field: fc.string({ maxLength: 12 }), value: anyJson }),
      fc.record({ kind: fc.constant("drop" as const), field: fc.nat(), value: fc.constant(null) }),
      fc.record({ kind: fc.constant("replace" as const), field: fc.constant(0), value: anyJson }),
      fc.record({
        kind: fc.constant("key" as const),
        field: fc.constant(0),
        value: fc.record({
          public: hostileKeyArb("public"),
          private: hostileKeyArb("private"),
          signing: hostileKeyArb("signing"),
        }),
      }),
    );
    const routeName = fc.constantFrom(...Object.keys(valid));
    await fc.assert(
      fc.asyncProperty(
        routeName,
        fc.array(mutation, { minLength: 1, maxLength: 3 }),
        async (name, changes) => {
          const route = valid[name] as (typeof valid)[string];
          let body: unknown = { ...route.body };
          for (const change of changes) body = mutatedBody(route.body, route.keyKind, body, change);
          const answer = await send(svc, "POST", route.path, {
            body: JSON.stringify(body),
            headers: { "content-type": "application/json", "x-api-key": route.key },
          });
          expectWellFormed(answer, `${name} ${JSON.stringify(body).slice(0, 200)}`);
        },
      ),
      fuzzSettings(RUNS.restMutated),
    );
  });

  it("answers encrypt and both gateways well for receipts made of valid and invalid parts", async () => {
    let accepted = 0;
    const target = fc.constantFrom(
      "/api/v1/receipts/encrypt",
      "/api/v1/payments/gateway_a/create",
      "/api/v1/payments/gateway_b/create",
    );
    await fc.assert(
      fc.asyncProperty(target, receiptArb, async (path, receipt) => {
        const body = path.endsWith("encrypt")
          ? { ...receipt, amount: undefined, cardNonce: undefined }
          : receipt;
        const answer = await send(svc, "POST", path, {
          body: JSON.stringify(body),
          headers: { "content-type": "application/json", "x-api-key": svc.merchantKey },
        });
        const envelope = expectWellFormed(answer, `${path} ${JSON.stringify(body).slice(0, 300)}`);
        if (envelope.success) accepted += 1;
        if (envelope.success)
          expect(envelope.data?.receiptId ?? envelope.data?.serviceMetadata?.receiptId).toBe(
            receipt.receiptId,
          );
      }),
      fuzzSettings(RUNS.restReceipts),
    );
    // The generator reaches the sealing and payment code, not only the validator.
    expect(accepted).toBeGreaterThan(0);
  });

  it("answers both GET routes well for any path segment and query string", async () => {
    const segment = fc.oneof(
      fc.string({ unit: "binary", minLength: 1, maxLength: 30 }),
      fc.string({ minLength: 1 }),
    );
    const query = fc.dictionary(fc.string({ maxLength: 10 }), fc.string({ unit: "binary", maxLength: 20 }), {
      maxKeys: 3,
    });
    await fc.assert(
      fc.asyncProperty(fc.boolean(), segment, query, async (list, id, params) => {
        const encoded = encodeURIComponent(id);
        const path = list ? `/api/v1/receipts/${encoded}` : `/api/v1/transactions/${encoded}/receipt`;
        const search = new URLSearchParams(params).toString();
        const answer = await send(svc, "GET", search === "" ? path : `${path}?${search}`, {
          headers: { "x-api-key": list ? svc.issuerKey : svc.merchantKey },
        });
        expectWellFormed(answer, `${path}?${search}`);
      }),
      fuzzSettings(RUNS.restGet),
    );
  });

  const rpcCall = () => rpcCallArb(RPCS, validByRpc);

  it("never answers a server status to protobuf bytes over gRPC", async () => {
    await fc.assert(
      fc.asyncProperty(rpcCall(), async ({ path, role, bytes, invented }) => {
        surfaces.grpc += 1;
        const key = role === "issuer" ? svc.issuerKey : svc.merchantKey;
        const outcome = await grpcRaw(grpc, path, bytes, { "x-api-key": key });
        const label = `${path} ${Buffer.from(bytes).toString("hex").slice(0, 400)}: ${status[outcome.code]} ${outcome.details}`;
        if (invented) expect(outcome.code, label).toBe(status.UNIMPLEMENTED);
        else expect(SERVER_FAULTS.has(outcome.code), label).toBe(false);
      }),
      fuzzSettings(RUNS.grpc),
    );
  });

  it("never answers a server status to protobuf bytes over gRPC-Web", async () => {
    await fc.assert(
      fc.asyncProperty(rpcCall(), fc.boolean(), async ({ path, role, bytes, invented }, framed) => {
        surfaces["grpc-web"] += 1;
        const key = role === "issuer" ? svc.issuerKey : svc.merchantKey;
        // Framed as gRPC-Web (a 5-byte prefix) mostly; sometimes the raw bytes, a broken frame.
        const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), bytes]);
        frame.writeUInt32BE(bytes.length, 1);
        const answer = await send(svc, "POST", path, {
          body: framed ? frame : bytes,
          headers: { "content-type": "application/grpc-web+proto", "x-api-key": key },
        });
        const label = `${path} ${Buffer.from(bytes).toString("hex").slice(0, 400)}: ${answer.status}`;
        expect(answer.status, label).toBeLessThan(500);
        const grpcStatus = Number(
          answer.headers.get("grpc-status") ?? /grpc-status: ?(\d+)/.exec(answer.text)?.[1],
        );
        // Unframed bytes may hold no message or several: a cardinality violation, which the gRPC
        // spec answers UNIMPLEMENTED (doc/statuscodes.md), the caller's fault and not a server's;
        // and UNIMPLEMENTED is the answer to a method that does not exist.
        const unimplemented = (invented || !framed) && grpcStatus === status.UNIMPLEMENTED;
        expect(SERVER_FAULTS.has(grpcStatus) && !unimplemented, `${label} grpc-status ${grpcStatus}`).toBe(
          false,
        );
      }),
      fuzzSettings(RUNS.grpcWeb),
    );
  });

  it("never answers a server status to any JSON over Connect", async () => {
    const rpcWithBody = fc
      .constantFrom(...RPCS)
      .chain(([method, role]) =>
        connectBodyArb(method as DescMethod, validByRpc[method.name]).map((text) => ({ method, role, text })),
      );
    await fc.assert(
      fc.asyncProperty(rpcWithBody, async ({ method, role, text }) => {
        surfaces.connect += 1;
        const key = role === "issuer" ? svc.issuerKey : svc.merchantKey;
        const answer = await connectRaw(svc, method as DescMethod, text, { "x-api-key": key });
        expect(
          answer.status,
          `${method.name} ${text.slice(0, 200)}: ${answer.text.slice(0, 200)}`,
        ).toBeLessThan(500);
      }),
      fuzzSettings(RUNS.connect),
    );
  });

  it("answers every operator API request in the envelope, never with a 5xx", async () => {
    let client = 0;
    await fc.assert(
      fc.asyncProperty(adminRequestArb(ADMIN_TOKEN), async (request) => {
        // A new client address per request (through the trusted proxy): the operator API's own
        // limit is per address, and 1,000 calls from one would be 429 after the first 120.
        client += 1;
        const answer = await send(svc, request.method, request.path, {
          headers: {
            ...request.headers,
            "x-forwarded-for": `10.${client >> 16}.${(client >> 8) & 255}.${client & 255}`,
          },
          ...(request.body === undefined ? {} : { body: request.body }),
        });
        expectWellFormed(
          answer,
          `${request.method} ${request.path} ${request.body?.slice(0, 100) ?? ""}`,
          "admin",
        );
      }),
      fuzzSettings(RUNS.admin),
    );
  });

  it("logged no server error, is still alive and serving, and its memory stayed bounded", async () => {
    expect(svc.errorLines()).toEqual([]);
    expect(svc.alive(), JSON.stringify(svc.ended())).toBe(true);
    expect((await send(svc, "GET", "/healthz")).status).toBe(200);
    const rssAtEnd = await svc.rssMb();
    const inputs = Object.values(surfaces).reduce((a, b) => a + b, 0);
    const limit = RSS_WARM_UP_MB + (inputs * RSS_PER_INPUT_KB) / 1024;
    const metrics = await (await fetch(`${svc.baseUrl}/metrics`)).text();
    const methods = new Set(
      [...metrics.matchAll(/^http_requests_total\{[^}]*method="([^"]*)"/gm)].map((m) => m[1]),
    );
    console.log(
      `hardening: service RSS ${rssAtStart.toFixed(1)} MB before the run, ${rssAtEnd.toFixed(1)} MB after (limit +${limit.toFixed(0)} MB for ${inputs} inputs); ${methods.size} method labels in /metrics`,
    );
    expect(rssAtEnd - rssAtStart).toBeLessThan(limit);
    // Every RPC, every route, `unmatched`: a few dozen, whatever paths the run invented.
    expect(methods.size).toBeLessThanOrEqual(MAX_METHOD_LABELS_SEEN);
    expect(methods.has("unmatched")).toBe(true);
  });

  it("ran at least 1,000 inputs per surface (REST, gRPC, Connect, gRPC-Web, /admin/v1), or what FC_RUNS asked for", () => {
    console.log(`hardening: inputs per surface ${JSON.stringify(surfaces)}`);
    const rest = fuzzSettings(RUNS.restMutated).numRuns + fuzzSettings(RUNS.restReceipts).numRuns;
    expect(surfaces.rest).toBe(rest + fuzzSettings(RUNS.restGet).numRuns);
    expect(surfaces.grpc).toBe(fuzzSettings(RUNS.grpc).numRuns);
    expect(surfaces.connect).toBe(fuzzSettings(RUNS.connect).numRuns);
    expect(surfaces["grpc-web"]).toBe(fuzzSettings(RUNS.grpcWeb).numRuns);
    expect(surfaces.admin).toBe(fuzzSettings(RUNS.admin).numRuns);
    if (process.env.FC_RUNS === undefined) {
      for (const count of Object.values(surfaces)) expect(count).toBeGreaterThanOrEqual(1_000);
    }
  });
});
