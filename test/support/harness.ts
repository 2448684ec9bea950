import { createHash } from "node:crypto";
import { type App, type AppDeps, buildApp } from "../../src/app.js";
import { type Clock, systemClock } from "../../src/clock.js";
import { type Config, loadConfig } from "../../src/config.js";
import { createApiKey, type NewApiKey } from "../../src/domain/api-keys.js";
import type { ResolveAll } from "../../src/events/ssrf.js";
import type { ListenerOptions } from "../../src/http/listener.js";
import { createLogger } from "../../src/logging.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/types.js";
import { ESCROW_FIXTURE, useFixtureRsaKeys } from "./fixture-keys.js";

/** A running service on an ephemeral port, with one issuer and one merchant key. */
export interface TestService {
  app: App;
  store: Store;
  config: Config;
  baseUrl: string;
  port: number;
  issuerKey: string;
  merchantKey: string;
  /** Creates another API key (other tenants, tiers, merchant allow-lists). */
  newKey(input: NewApiKey): Promise<string>;
  close(): Promise<void>;
}

/** Starts the whole service (embedded store) on 127.0.0.1:0, as `main` would. */
export async function startService(
  options: {
    env?: NodeJS.ProcessEnv;
    clock?: Clock;
    store?: Store;
    logLines?: string[];
    /** Connection timeouts, to see idle and slow clients cut off without waiting seconds. */
    listener?: ListenerOptions;
    /** How long `close()` waits for calls in flight (default 10 s). */
    shutdownGraceMs?: number;
    /**
     * Whether generate-keys finds new RSA primes on the service's key-generation workers, as in
     * production. By default it hands out fixture pairs (test/support/fixture-keys.ts): finding
     * primes takes 50-500 ms of CPU per pair at a low priority, and only the five-step flow tests are
     * about where the keys come from; the worker's key generation is tested in test/crypto.
     */
    realRsaKeyGeneration?: boolean;
    /** Resolves webhook receivers' host names (the SSRF tests map names to chosen addresses). */
    resolve?: ResolveAll;
    /** The service's randomness of non-secret choices (the retry jitter); the CSPRNG by default. */
    random?: AppDeps["random"];
    /** The key log's seams (the tenants' signing keys, the directory source, the witnesses' HTTP client). */
    kt?: AppDeps["kt"];
    /** The chain's own hook: sees every call enter each step of the chain. */
    onChainStep?: AppDeps["onChainStep"];
  } = {},
): Promise<TestService> {
  const config = loadConfig({
    RECEIPTS_ENV: "dev",
    LOG_LEVEL: options.logLines ? "trace" : "silent",
    // A fixture escrow key instead of one generated per service (test/support/fixture-keys.ts).
    ESCROW_PRIVATE_KEY: ESCROW_FIXTURE.privateKey,
    // CI runs the HTTP and end-to-end suites once more with the fast paths off (FAST_PATHS=off).
    ...(process.env.FAST_PATHS === undefined ? {} : { FAST_PATHS: process.env.FAST_PATHS }),
    ...options.env,
  });
  const store = options.store ?? createMemoryStore();
  await store.init();
  const lines = options.logLines;
  const logger = createLogger(
    config.logLevel,
    lines ? { write: (line: string) => lines.push(line) } : undefined,
  );
  const clock = options.clock ?? systemClock;
  const app = await buildApp({
    config,
    store,
    logger,
    clock,
    workers: 2,
    ...(options.listener === undefined ? {} : { listener: options.listener }),
    ...(options.shutdownGraceMs === undefined ? {} : { shutdownGraceMs: options.shutdownGraceMs }),
    ...(options.resolve === undefined ? {} : { webhookResolver: options.resolve }),
    ...(options.kt === undefined ? {} : { kt: options.kt }),
    ...(options.random === undefined ? {} : { random: options.random }),
    ...(options.onChainStep === undefined ? {} : { onChainStep: options.onChainStep }),
  });
  if (options.realRsaKeyGeneration !== true) useFixtureRsaKeys(app.domain.pool);
  const address = await app.server.listen(0, "127.0.0.1");
  const port = typeof address === "string" ? Number(new URL(address).port) : address.port;
  const newKey = async (input: NewApiKey) => (await createApiKey(store, "dev", input, clock.now())).key;
  return {
    app,
    store,
    config,
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    issuerKey: await newKey({ role: "issuer", tier: "standard", tenantId: "issuer-1" }),
    merchantKey: await newKey({ role: "merchant", tier: "standard", tenantId: "merchant-1" }),
    newKey,
    close: () => app.close(),
  };
}

/** What a client needs of a running service: where it is, and its two API keys. */
export type Reachable = Pick<TestService, "baseUrl" | "issuerKey" | "merchantKey">;

/** SHA-256 hex of a (test) card number: what an issuer app sends as `hashedPan`. */
export function hashPan(pan: string): string {
  return createHash("sha256").update(pan).digest("hex");
}

/** POSTs JSON with an API key and returns status, headers and parsed body. */
export async function post(
  svc: Pick<TestService, "baseUrl">,
  path: string,
  key: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Headers; body: Envelope }> {
  const res = await fetch(`${svc.baseUrl}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": key, ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Envelope };
}

/** GETs with an API key and returns status, headers and parsed body. */
export async function get(
  svc: Pick<TestService, "baseUrl">,
  path: string,
  key: string,
): Promise<{ status: number; headers: Headers; body: Envelope }> {
  const res = await fetch(`${svc.baseUrl}${path}`, { headers: { "x-api-key": key } });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Envelope };
}

/** The REST envelope, loosely typed for assertions. */
export interface Envelope {
  success: boolean;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions index freely into response data
  data?: any;
  error?: { code: string; message: string; details: string; timestamp: string; request_id: string };
}

/** A complete, valid receipt body for encrypt / create. */
export function receiptBody(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    receiptId: `rcpt-${Math.random().toString(36).slice(2, 10)}`,
    merchantId: "merchant-001",
    merchantName: "Corner Coffee",
    transactionId: `txn-${Math.random().toString(36).slice(2, 10)}`,
    transactionDate: "2026-01-01T09:30:00Z",
    currency: "eur",
    recipientHashedPan: hashPan("4111111111111111"),
    items: [
      { lineItemId: "li-1", name: "Flat white", quantity: 2, unitPrice: 350, totalPrice: 700 },
      { lineItemId: "li-2", name: "Croissant", quantity: 1, unitPrice: 250, totalPrice: 250 },
    ],
    totalAmount: 950,
    ...overrides,
  };
}
