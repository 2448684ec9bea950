import {
  type Cardholder,
  generateKeysBody,
  grantAll,
  hashPan,
  P256_SUITE,
  postJson,
  receiptJson,
  rotation,
  type Seed,
  sizedReceiptText,
} from "./fixtures.js";
import { grpcTarget, sizedReceipts } from "./grpc.js";
import { type HttpLoad, runCalls, runHttp, type Sample } from "./load.js";
import type { Baseline, Service } from "./targets.js";

/**
 * The loads of a run, each a {@link Phase} that runs for a given time, by name: REST through
 * autocannon and gRPC through a closed loop of calls. The service and the baseline get the same loads
 * under the same names, with the same bodies (fresh receipt ids, rotating cardholders), so any two
 * targets can be compared load by load: service against baseline, or one build against another.
 */

/** A load: given a duration (and optionally a fixed rate), runs and returns what it saw. */
export type Phase = (seconds: number, rate?: number) => Promise<Sample>;

/** The comparable loads, in the order of the report. */
export const LOADS = [
  ["REST", "encrypt"],
  ["REST", "create payment"],
  ["REST", "decrypt"],
  ["REST", "list receipts"],
  ["REST", "generate-keys"],
  ["gRPC", "encrypt"],
  ["gRPC", "create payment"],
  ["gRPC", "decrypt"],
] as const;

/**
 * The loads of the P-256 suite (`HPKE-P256-SHA256-A256GCM`), measured like the RSA ones
 * (service against the bare route doing the same crypto, alternating, in the same run) on a service
 * whose cardholders hold P-256 keys: surface, operation as the report shows it, name on the command line.
 */
export const P256_LOADS = [
  ["REST", "generate-keys (P-256)", "p256-rest-generate-keys"],
  ["REST", "encrypt (P-256)", "p256-rest-encrypt"],
  ["REST", "decrypt (P-256)", "p256-rest-decrypt"],
  ["gRPC", "encrypt (P-256)", "p256-grpc-encrypt"],
  ["gRPC", "decrypt (P-256)", "p256-grpc-decrypt"],
] as const;

/** `--only p256`: every P-256 measurement. */
export const P256_GROUP = "p256";

/** The P-256 measurements by name: the loads above and opening receipts on the device (in-process). */
export const P256_MEASUREMENTS: readonly string[] = [
  ...P256_LOADS.map(([, , name]) => name),
  "p256-open-on-device",
];

/** The name of a load on the command line: `rest-encrypt`, `grpc-create-payment`, ... */
export function loadName(surface: string, operation: string): string {
  return `${surface}-${operation}`.toLowerCase().replaceAll(" ", "-");
}

/** The loads of one target by {@link loadName}. */
export type Loads = Record<string, Phase>;

/** How hard the phases push. */
export interface LoadSettings {
  /** autocannon connections of the REST phases. */
  connections: number;
  /** Concurrent calls of the gRPC phases. */
  grpcConcurrency: number;
  /** autocannon connections of the generate-keys phase. */
  keygenConnections: number;
  /** Concurrent `generateKeyPair` calls of the raw baseline. */
  rawKeygenConcurrency: number;
}

/**
 * Connections of the REST phases at full load, the same for the service and the baseline. Enough to
 * saturate both: a service encrypt waits for a worker thread, so at equal concurrency it spends longer
 * in flight than the bare route's, and at 16 connections its event loop sat idle between requests with
 * a fifth of each core unused (REST encrypt at 62% of the bare route on average, against 68% at 64
 * connections and 69% at 128; the bare route peaked at 64, at 0.98 of a core throughout).
 */
export const FULL_LOAD_CONNECTIONS = 64;

/**
 * Connections of a fixed-rate phase. autocannon paces each connection with its own timer and starts
 * them together, so N connections send their requests in bursts of N: at 1,500 req/s, 16 connections
 * put p50 at 4.5 ms and p99 at 11 ms where 4 gave 0.8 and 4.9 ms, the rest being requests queued
 * behind their own burst. Four connections sustain the rates measured here with room to spare.
 */
export const RATE_CONNECTIONS = 4;

/** An HTTP/1.1 phase over `connections` keep-alive connections ({@link RATE_CONNECTIONS} at a fixed rate). */
export function http(load: Omit<HttpLoad, "seconds" | "rate" | "connections">, connections: number): Phase {
  return (seconds, rate) =>
    runHttp({
      ...load,
      seconds,
      ...(rate === undefined
        ? { connections }
        : { rate, connections: Math.min(connections, RATE_CONNECTIONS) }),
    });
}

function callLoop(call: () => Promise<unknown>, concurrency: number): Phase {
  return (seconds) => runCalls({ call, concurrency, seconds });
}

/** Grants live three minutes; the decrypt loads take new ones when theirs are older than this. */
const GRANT_REFRESH_MS = 60_000;

/** The loads against the service at `svc`, seeded with `seed`. */
export function serviceLoads(svc: Service, seed: Seed, settings: LoadSettings): Loads {
  const holders = seed.cardholders;
  const next = rotation(holders);
  const rest = (load: Omit<HttpLoad, "seconds" | "rate" | "connections">) => http(load, settings.connections);
  const merchant = { "x-api-key": svc.keys.merchant };
  const issuer = { "x-api-key": svc.keys.issuer };
  let tokens: string[] = [];
  let grantedAt = 0;
  const withGrants =
    (phase: Phase): Phase =>
    async (seconds, rate) => {
      if (Date.now() - grantedAt > GRANT_REFRESH_MS) {
        tokens = await grantAll(svc.url, svc.keys, holders);
        grantedAt = Date.now();
      }
      return phase(seconds, rate);
    };
  let d = 0;
  const credentials = () => {
    const i = d++ % holders.length;
    const h = holders[i] as Cardholder;
    return { paymentId: h.paymentId, tokenId: tokens[i] ?? "", privateKey: h.privateKey };
  };
  const grpc = grpcTarget(svc.url, svc.keys, holders, credentials);
  return {
    "rest-encrypt": rest({
      url: `${svc.url}/api/v1/receipts/encrypt`,
      method: "POST",
      headers: merchant,
      body: () => JSON.stringify(receiptJson(next().hashedPan)),
    }),
    "rest-create-payment": rest({
      url: `${svc.url}/api/v1/payments/gateway_a/create`,
      method: "POST",
      headers: merchant,
      body: () => JSON.stringify(receiptJson(next().hashedPan, 950)),
    }),
    "rest-decrypt": withGrants(
      rest({
        url: `${svc.url}/api/v1/payments/decrypt`,
        method: "POST",
        headers: issuer,
        body: () => JSON.stringify(credentials()),
      }),
    ),
    "rest-list-receipts": rest({
      url: `${svc.url}/api/v1/receipts/${seed.lister.userId}`,
      method: "GET",
      headers: issuer,
    }),
    "rest-generate-keys": http(
      {
        url: `${svc.url}/api/v1/onboarding/generate-keys`,
        method: "POST",
        headers: issuer,
        body: () => "{}",
      },
      settings.keygenConnections,
    ),
    "grpc-encrypt": callLoop(grpc.encrypt, settings.grpcConcurrency),
    "grpc-create-payment": callLoop(grpc.createPayment, settings.grpcConcurrency),
    "grpc-decrypt": withGrants(callLoop(grpc.decrypt, settings.grpcConcurrency)),
  };
}

/**
 * The same loads against the baseline (set up with the cardholders of `seed`): the same bodies, the
 * same private keys; generate-keys is the raw `generateKeyPair` rate instead of an endpoint.
 */
export function baselineLoads(base: Baseline, svc: Service, seed: Seed, settings: LoadSettings): Loads {
  const holders = seed.cardholders;
  const next = rotation(holders);
  const rest = (load: Omit<HttpLoad, "seconds" | "rate" | "connections">) => http(load, settings.connections);
  let d = 0;
  const credentials = () => {
    const i = d++ % holders.length;
    return { paymentId: `bpay-${i}`, tokenId: "unused", privateKey: (holders[i] as Cardholder).privateKey };
  };
  const grpc = grpcTarget(base.grpcUrl, svc.keys, holders, credentials);
  return {
    "rest-encrypt": rest({
      url: `${base.url}/receipts/encrypt`,
      method: "POST",
      headers: {},
      body: () => JSON.stringify(receiptJson(next().hashedPan)),
    }),
    "rest-create-payment": rest({
      url: `${base.url}/payments/gateway_a/create`,
      method: "POST",
      headers: {},
      body: () => JSON.stringify(receiptJson(next().hashedPan, 950)),
    }),
    "rest-decrypt": rest({
      url: `${base.url}/payments/decrypt`,
      method: "POST",
      headers: {},
      body: () => JSON.stringify(credentials()),
    }),
    "rest-list-receipts": rest({
      url: `${base.url}/receipts/${seed.lister.userId}`,
      method: "GET",
      headers: {},
    }),
    "rest-generate-keys": async (seconds) => {
      const raw = await postJson(`${base.url}/raw-keygen`, "", {
        seconds,
        concurrency: settings.rawKeygenConcurrency,
      });
      const count = Number(raw.count);
      return { ok: count, latencies: [], failed: 0, seconds, failures: {} };
    },
    "grpc-encrypt": callLoop(grpc.encrypt, settings.grpcConcurrency),
    "grpc-create-payment": callLoop(grpc.createPayment, settings.grpcConcurrency),
    "grpc-decrypt": callLoop(grpc.decrypt, settings.grpcConcurrency),
    // Not a comparison of its own: the hand-written floor of REST encrypt (bench/floor.ts).
    "rest-encrypt-floor": rest({
      url: `${base.url}/floor/receipts/encrypt`,
      method: "POST",
      headers: { "x-api-key": svc.keys.merchant },
      body: () => JSON.stringify(receiptJson(next().hashedPan)),
    }),
  };
}

/**
 * The P-256 loads against the service at `svc`, seeded with P-256 cardholders: encrypt and decrypt are
 * the RSA loads' requests (the suite follows the recipient's key and the private key sent);
 * generate-keys asks for a P-256 pair, at full load (a P-256 pair costs far less than an RSA one).
 */
export function p256ServiceLoads(svc: Service, seed: Seed, settings: LoadSettings): Loads {
  const loads = serviceLoads(svc, seed, settings);
  return {
    "p256-rest-generate-keys": http(
      {
        url: `${svc.url}/api/v1/onboarding/generate-keys`,
        method: "POST",
        headers: { "x-api-key": svc.keys.issuer },
        body: () => generateKeysBody(P256_SUITE),
      },
      settings.connections,
    ),
    "p256-rest-encrypt": loads["rest-encrypt"] as Phase,
    "p256-rest-decrypt": loads["rest-decrypt"] as Phase,
    "p256-grpc-encrypt": loads["grpc-encrypt"] as Phase,
    "p256-grpc-decrypt": loads["grpc-decrypt"] as Phase,
  };
}

/**
 * The same P-256 loads against the baseline, set up with the P-256 cardholders of `seed`: its
 * `/p256/...` routes seal and open with HPKE, and its gRPC handler does while set up for P-256.
 */
export function p256BaselineLoads(base: Baseline, svc: Service, seed: Seed, settings: LoadSettings): Loads {
  const loads = baselineLoads({ ...base, url: `${base.url}/p256` }, svc, seed, settings);
  return {
    "p256-rest-generate-keys": http(
      {
        url: `${base.url}/p256/onboarding/generate-keys`,
        method: "POST",
        headers: {},
        body: () => generateKeysBody(P256_SUITE),
      },
      settings.connections,
    ),
    "p256-rest-encrypt": loads["rest-encrypt"] as Phase,
    "p256-rest-decrypt": loads["rest-decrypt"] as Phase,
    "p256-grpc-encrypt": loads["grpc-encrypt"] as Phase,
    "p256-grpc-decrypt": loads["grpc-decrypt"] as Phase,
  };
}

/** REST encrypt for a card nobody registered (sealed to escrow): the same work on every cluster worker. */
export function escrowEncrypt(svc: Service, connections: number): Phase {
  const pan = hashPan("bench-unregistered-card");
  return http(
    {
      url: `${svc.url}/api/v1/receipts/encrypt`,
      method: "POST",
      headers: { "x-api-key": svc.keys.merchant },
      body: () => JSON.stringify(receiptJson(pan)),
    },
    connections,
  );
}

/** The loads measured per receipt size: encrypt and create payment, REST and gRPC. */
export const SIZED_LOADS = [
  ["REST", "encrypt"],
  ["REST", "create payment"],
  ["gRPC", "encrypt"],
  ["gRPC", "create payment"],
] as const;

/**
 * Encrypt and create payment with receipts of `items` line items (taxes on every item, the full
 * merchant address), against the service at `svc` when `base` is undefined, else against the baseline;
 * by {@link loadName}. Both get the same bodies.
 */
export function sizedLoads(
  svc: Service,
  seed: Seed,
  settings: LoadSettings,
  items: number,
  base?: Baseline,
): Loads {
  const next = rotation(seed.cardholders);
  const rest = (load: Omit<HttpLoad, "seconds" | "rate" | "connections">) => http(load, settings.connections);
  const headers = base === undefined ? { "x-api-key": svc.keys.merchant } : {};
  const prefix = base === undefined ? `${svc.url}/api/v1` : base.url;
  const unused = () => ({ paymentId: "", tokenId: "", privateKey: "" });
  const grpc = grpcTarget(base?.grpcUrl ?? svc.url, svc.keys, seed.cardholders, unused, sizedReceipts(items));
  return {
    "rest-encrypt": rest({
      url: `${prefix}/receipts/encrypt`,
      method: "POST",
      headers,
      body: () => sizedReceiptText(next().hashedPan, items),
    }),
    "rest-create-payment": rest({
      url: `${prefix}/payments/gateway_a/create`,
      method: "POST",
      headers,
      body: () => sizedReceiptText(next().hashedPan, items, 950),
    }),
    "grpc-encrypt": callLoop(grpc.encrypt, settings.grpcConcurrency),
    "grpc-create-payment": callLoop(grpc.createPayment, settings.grpcConcurrency),
  };
}
