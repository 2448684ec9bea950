/* Over 400 lines on purpose: every setting the service reads from its environment, with its default,
 * range and error message, in one place (the limits rule of this codebase); the key log's and the
 * events' settings already live in their own files. */
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { type EventsConfig, readEventsConfig } from "./config-events.js";
import { type KtConfig, readKtConfig } from "./config-kt.js";
import { escrowKeyOf } from "./crypto/escrow-keys.js";
import { AppError } from "./errors.js";
import { FAST_PATH_NEEDS, FAST_PATHS, type FastPath } from "./fast-paths.js";
import type { StoreSettings } from "./store/index.js";
import { DEFAULT_STORE_TIMEOUT_MS } from "./store/time-limit.js";
import type { Environment, Tier } from "./store/types.js";
import { parseTrustedProxies, type TrustedProxies } from "./trusted-proxies.js";

/** Requests allowed per key per minute, for all calls and for generate-keys separately. */
export interface TierLimits {
  requestsPerMinute: number;
  generateKeysPerMinute: number;
}

/**
 * The service's configuration, read once from the environment at start-up. The store's part
 * (`STORE`, `MONGODB_URI`, `MONGODB_DB`, `STORE_TIMEOUT_MS`, `RECEIPT_RETENTION_DAYS`) is the store's
 * own settings type.
 */
export interface Config extends StoreSettings {
  port: number;
  /**
   * The address to listen on (`HOST`): `127.0.0.1` by default, so a development server is reachable
   * from this machine only; `0.0.0.0` (or `::`) to accept connections from others, e.g. in a container.
   */
  host: string;
  env: Environment;
  /** Server secret for the HMAC of hashed PANs at rest. */
  hashedPanPepper: string;
  /** True when the pepper was generated for this process (development only). */
  pepperGenerated: boolean;
  /**
   * The service escrow private keys (base64 DER PKCS#8 or PEM), newest first: the first seals, all of
   * them release what they sealed. Empty in development: one is generated at start-up.
   */
  escrowPrivateKeys: string[];
  /**
   * The operator API's bearer token (`ADMIN_TOKEN`, at least 32 characters); undefined turns the
   * operator API off (every `/admin/v1` path is 404).
   */
  adminToken: string | undefined;
  /** Lifetime of a decrypt grant, 120-180 s. */
  grantTtlSeconds: number;
  /** How long an unreleased escrowed receipt is kept, in days. */
  escrowRetentionDays: number;
  /** How fast escrow may grow for one card, and how much of it a registration releases itself. */
  escrow: EscrowLimits;
  bodyLimitBytes: number;
  /**
   * Worker threads for the RSA work (sealing, decrypting, escrow release), and as many again, at a
   * lower priority, for key generation (`CRYPTO_THREADS`, default one per core; a cluster gives each
   * process its share of the cores).
   */
  cryptoThreads: number;
  logLevel: string;
  tiers: Record<Tier, TierLimits>;
  /**
   * Browser origins allowed to call the service cross-origin (`CORS_ORIGINS`, comma-separated, e.g.
   * `http://localhost:5173`); empty (the default) turns CORS off, so browsers allow same-origin pages only.
   */
  corsOrigins: string[];
  /** Whether gRPC server reflection is served (`GRPC_REFLECTION`, `on` by default, `off` to hide the schema). */
  grpcReflection: boolean;
  /**
   * Time to receive a complete request, body included, in milliseconds (`REQUEST_TIMEOUT_MS`,
   * default 30 000): an HTTP/1.1 request gets 408, an HTTP/2 stream whose request has not fully
   * arrived is reset.
   */
  requestTimeoutMs: number;
  /**
   * Proxies (load balancers) whose `X-Forwarded-For` is believed (`TRUSTED_PROXIES`, a comma-separated
   * list of IPv4/IPv6 addresses and CIDR networks; default none): the client's address, for per-IP
   * rate limits and the `sourceIp` of grants and audit, is then read from that header.
   */
  trustedProxies: TrustedProxies;
  /** HTTP/2 limits of one connection (`HTTP2_*`); see `ListenerOptions`. */
  http2: {
    /** Streams open at once, advertised in SETTINGS (`HTTP2_MAX_CONCURRENT_STREAMS`, default 100). */
    maxConcurrentStreams: number;
    /** Idle time before GOAWAY, ms (`HTTP2_IDLE_TIMEOUT_MS`, default 72 000). */
    idleTimeoutMs: number;
    /** Early stream resets allowed in a burst (`HTTP2_RESET_BURST`, default 200). */
    resetBurst: number;
    /** Early stream resets allowed per second after the burst (`HTTP2_RESET_RATE`, default 50). */
    resetRatePerSecond: number;
    /**
     * HTTP/2 connections one client address may hold open at once (`HTTP2_MAX_CONNECTIONS_PER_ADDRESS`,
     * default 100; trusted proxies exempt); more are refused with GOAWAY ENHANCE_YOUR_CALM.
     */
    maxConnectionsPerAddress: number;
  };
  /**
   * `FAST_PATHS` (default `on`): which hand-written fast paths (src/fast-paths.ts names each) serve
   * calls. `on` is all of them, `off` none (every call through connect-node/connect-fastify,
   * protobuf-es and node:crypto only), or a comma-separated list of the ones to keep on, for measuring
   * one against the others. This is the one place it is read.
   */
  fastPaths: FastPath[];
  /** Events, webhooks and the event stream (docs/events.md); see `EventsConfig`. */
  events: EventsConfig;
  /** The key log (docs/key-transparency.md): its signing key, witnesses and limits (`config-kt.ts`). */
  kt: KtConfig;
}

/**
 * The bounds on escrow that keep a card's registration fast whatever was escrowed for it (issue 31):
 * a merchant that plants receipts for a card it knows cannot plant them faster than the intake
 * limit, and a registration releases at most one bounded page itself, the rest after it answers.
 */
export interface EscrowLimits {
  /**
   * Receipts one merchant tenant may have escrowed for one card per window (`ESCROW_INTAKE_LIMIT`,
   * default 60); more are `rate_limit_exceeded` with `Retry-After`. Far above a shop's receipts for
   * one customer; it bounds what 30 days of escrow can hold for a card.
   */
  intakeLimit: number;
  /** The window of {@link intakeLimit}, in seconds (`ESCROW_INTAKE_WINDOW_SECONDS`, default 3600). */
  intakeWindowSeconds: number;
  /**
   * Escrowed receipts a registration releases before it answers (`ESCROW_RELEASE_PER_CALL`, default
   * 100, about a tenth of a second of RSA work); the rest are released in the background.
   */
  releasePerCall: number;
}

/**
 * HTTP/2 connections one address may hold open (`HTTP2_MAX_CONNECTIONS_PER_ADDRESS`) by default: far above
 * what one gRPC client opens (one per channel), far below a flood.
 */
export const DEFAULT_HTTP2_CONNECTIONS_PER_ADDRESS = 100;

/** The tier table, before `RATE_LIMIT_TIERS` overrides. */
export const DEFAULT_TIERS: Record<Tier, TierLimits> = {
  sandbox: { requestsPerMinute: 60, generateKeysPerMinute: 10 },
  standard: { requestsPerMinute: 1_200, generateKeysPerMinute: 60 },
  enterprise: { requestsPerMinute: 12_000, generateKeysPerMinute: 600 },
};

const ENVIRONMENTS: readonly string[] = ["live", "test", "dev"];
const LOG_LEVELS: readonly string[] = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

/** A configuration that cannot be used; the message lists every bad variable. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n  - ${problems.join("\n  - ")}`);
    this.name = "ConfigError";
  }
}

/**
 * Reads and validates the configuration. Every bad value is reported at once, with the variable's name.
 * Production (`RECEIPTS_ENV=live`) refuses to start without a pepper, an escrow key and MongoDB.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const settings = settingsOf(env);
  const { problems, int, oneOf } = settings;
  const receiptsEnv = oneOf<Environment>("RECEIPTS_ENV", ENVIRONMENTS, "dev");
  const { store, mongodbUri } = readStore(settings);
  const { pepper, pepperGenerated } = readPepper(settings);
  const escrowPrivateKeys = readEscrowKeys(settings);
  const adminToken = readAdminToken(settings);
  const events = readEventsConfig(settings);
  requireLastingSecrets(problems, receiptsEnv, store, {
    pepperGenerated,
    hasEscrowKey: escrowPrivateKeys.length > 0,
    webhookKeyGenerated: events.secretKeyGenerated,
  });
  const kt = readKtConfig(settings, receiptsEnv, store);
  const trusted = parseTrustedProxies(env.TRUSTED_PROXIES);
  problems.push(...trusted.problems);
  const escrowRetentionDays = int("ESCROW_RETENTION_DAYS", 30, 1, 3_650);

  const config: Config = {
    port: int("PORT", 8080, 0, 65_535),
    host: env.HOST || "127.0.0.1",
    env: receiptsEnv,
    store,
    mongodbUri,
    mongodbDb: readMongoDb(settings),
    hashedPanPepper: pepper,
    pepperGenerated,
    escrowPrivateKeys,
    adminToken,
    grantTtlSeconds: int("GRANT_TTL_SECONDS", 180, 120, 180),
    escrowRetentionDays,
    receiptRetentionDays: readRetention(settings, escrowRetentionDays),
    escrow: {
      intakeLimit: int("ESCROW_INTAKE_LIMIT", 60, 1, 1_000_000),
      intakeWindowSeconds: int("ESCROW_INTAKE_WINDOW_SECONDS", 3_600, 1, 86_400),
      releasePerCall: int("ESCROW_RELEASE_PER_CALL", 100, 1, 1_000),
    },
    bodyLimitBytes: int("BODY_LIMIT_BYTES", 1_048_576, 1_024, 64 * 1_048_576),
    storeTimeoutMs: int("STORE_TIMEOUT_MS", DEFAULT_STORE_TIMEOUT_MS, 10, 120_000),
    cryptoThreads: int("CRYPTO_THREADS", availableParallelism(), 1, 256),
    logLevel: oneOf("LOG_LEVEL", LOG_LEVELS, "info"),
    tiers: parseTiers(env.RATE_LIMIT_TIERS, problems),
    corsOrigins: parseOrigins(env.CORS_ORIGINS, problems),
    grpcReflection: oneOf("GRPC_REFLECTION", ["on", "off"], "on") === "on",
    requestTimeoutMs: int("REQUEST_TIMEOUT_MS", 30_000, 1_000, 600_000),
    trustedProxies: trusted.proxies,
    http2: {
      maxConcurrentStreams: int("HTTP2_MAX_CONCURRENT_STREAMS", 100, 1, 10_000),
      idleTimeoutMs: int("HTTP2_IDLE_TIMEOUT_MS", 72_000, 1_000, 3_600_000),
      resetBurst: int("HTTP2_RESET_BURST", 200, 1, 100_000),
      resetRatePerSecond: int("HTTP2_RESET_RATE", 50, 1, 100_000),
      maxConnectionsPerAddress: int(
        "HTTP2_MAX_CONNECTIONS_PER_ADDRESS",
        DEFAULT_HTTP2_CONNECTIONS_PER_ADDRESS,
        1,
        1_000_000,
      ),
    },
    fastPaths: parseFastPaths(env.FAST_PATHS, problems),
    events,
    kt,
  };
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

/**
 * The environment being read, with the problems found so far (in the order they are found, which is
 * the order `ConfigError` lists them in) and readers that add to them.
 */
interface Settings {
  env: NodeJS.ProcessEnv;
  problems: string[];
  /** The integer in `name`, from `min` to `max`; `fallback` when unset, or when bad (then reported). */
  int(name: string, fallback: number, min: number, max: number): number;
  /** The value of `name`, one of `allowed`; `fallback` when unset. A bad value is reported. */
  oneOf<T extends string>(name: string, allowed: readonly string[], fallback: T): T;
}

function settingsOf(env: NodeJS.ProcessEnv): Settings {
  const problems: string[] = [];
  const int = (name: string, fallback: number, min: number, max: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    const value = Number(raw);
    if (!/^\d+$/.test(raw.trim()) || value < min || value > max) {
      problems.push(`${name} must be an integer from ${min} to ${max} (got "${raw}")`);
      return fallback;
    }
    return value;
  };
  const oneOf = <T extends string>(name: string, allowed: readonly string[], fallback: T): T => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    if (!allowed.includes(raw)) problems.push(`${name} must be one of ${allowed.join(", ")} (got "${raw}")`);
    return raw as T;
  };
  return { env, problems, int, oneOf };
}

/**
 * `RECEIPT_RETENTION_DAYS`: unset, or whole days from 1 to 36,500 and at least the escrow's retention,
 * so that a receipt is kept as long as unreleased escrow is (its claim expires with the longer of the
 * two).
 */
function readRetention({ env, problems, int }: Settings, escrowDays: number): number | undefined {
  const raw = env.RECEIPT_RETENTION_DAYS;
  if (raw === undefined || raw === "") return undefined;
  const days = int("RECEIPT_RETENTION_DAYS", 0, 1, 36_500);
  if (days === 0) return undefined;
  if (days < escrowDays) {
    problems.push(
      `RECEIPT_RETENTION_DAYS must be at least ESCROW_RETENTION_DAYS (${escrowDays}): a receipt is kept as long as unreleased escrow (got "${raw}")`,
    );
  }
  return days;
}

/**
 * `MONGODB_DB` ("receipts" by default), checked whenever set against MongoDB's rules for database
 * names (under 64 bytes, none of / \ . " $, a space or NUL), which the driver checks only in part
 * (a dot) and the server only once connected, so a bad name would keep the service unready.
 */
function readMongoDb({ env, problems }: Settings): string {
  const name = env.MONGODB_DB || "receipts";
  if (Buffer.byteLength(name) >= 64 || /[/\\. "$\0]/.test(name)) {
    problems.push(
      `MONGODB_DB must be a MongoDB database name: under 64 bytes, without / \\ . " $, spaces or NUL (got ${JSON.stringify(name)})`,
    );
  }
  return name;
}

/** `STORE` and, for MongoDB, `MONGODB_URI` (required with `STORE=mongodb`, checked whenever set). */
function readStore({ env, problems, oneOf }: Settings): Pick<Config, "store" | "mongodbUri"> {
  const store = oneOf<"memory" | "mongodb">("STORE", ["memory", "mongodb"], "memory");
  const mongodbUri = env.MONGODB_URI || undefined;
  if (store === "mongodb" && !mongodbUri) problems.push("MONGODB_URI is required when STORE=mongodb");
  if (mongodbUri && !/^mongodb(\+srv)?:\/\//.test(mongodbUri)) {
    problems.push("MONGODB_URI must start with mongodb:// or mongodb+srv://");
  }
  return { store, mongodbUri };
}

/** `HASHED_PAN_PEPPER`, at least 32 characters; unset, a random one for this process only. */
function readPepper({ env, problems }: Settings): { pepper: string; pepperGenerated: boolean } {
  const pepper = env.HASHED_PAN_PEPPER ?? "";
  if (pepper === "") return { pepper: randomSecret(), pepperGenerated: true };
  if (pepper.length < 32) problems.push("HASHED_PAN_PEPPER must be at least 32 characters");
  return { pepper, pepperGenerated: false };
}

/** The escrow private keys, from `ESCROW_PRIVATE_KEY` or the file `ESCROW_PRIVATE_KEY_FILE` (not both). */
function readEscrowKeys({ env, problems }: Settings): string[] {
  let escrowKeysText = env.ESCROW_PRIVATE_KEY || undefined;
  const escrowFile = env.ESCROW_PRIVATE_KEY_FILE || undefined;
  if (escrowKeysText && escrowFile) {
    problems.push("set only one of ESCROW_PRIVATE_KEY and ESCROW_PRIVATE_KEY_FILE");
  } else if (escrowFile) {
    try {
      escrowKeysText = readFileSync(escrowFile, "utf8");
    } catch {
      problems.push(`ESCROW_PRIVATE_KEY_FILE cannot be read (${escrowFile})`);
    }
  }
  const keys = escrowKeysText === undefined ? [] : splitKeys(escrowKeysText);
  checkEscrowKeys(
    keys,
    escrowFile === undefined ? "ESCROW_PRIVATE_KEY" : "ESCROW_PRIVATE_KEY_FILE",
    problems,
  );
  return keys;
}

/**
 * Each configured escrow key parses and none is given twice, checked here so that a bad key is named
 * at start-up (by its place in the list, never quoting it) rather than failing the crypto pool later.
 */
function checkEscrowKeys(keys: readonly string[], variable: string, problems: string[]): void {
  const seen = new Set<string>();
  keys.forEach((key, i) => {
    let keyId: string;
    try {
      keyId = escrowKeyOf(key).keyId;
    } catch (err) {
      const description = err instanceof AppError ? err.violations[0]?.description : undefined;
      problems.push(`${variable}: key ${i + 1} ${description ?? "is not a usable private key"}`);
      return;
    }
    if (seen.has(keyId)) problems.push(`${variable}: key ${i + 1} is the same key as an earlier one`);
    seen.add(keyId);
  });
}

/**
 * `ADMIN_TOKEN`, at least {@link MIN_ADMIN_TOKEN_LENGTH} characters of which at least
 * {@link MIN_ADMIN_TOKEN_DISTINCT} different; unset turns the operator API off. The second rule
 * refuses what is long but not random (`aaaa...`, `passwordpassword...`), which a length alone lets
 * through. The messages never quote the token.
 */
function readAdminToken({ env, problems }: Settings): string | undefined {
  const adminToken = env.ADMIN_TOKEN || undefined;
  if (adminToken === undefined) return undefined;
  const advice = "e.g. openssl rand -base64 32; unset it to turn the operator API off";
  const distinct = new Set(adminToken).size;
  if (adminToken.length < MIN_ADMIN_TOKEN_LENGTH) {
    problems.push(`ADMIN_TOKEN must be at least ${MIN_ADMIN_TOKEN_LENGTH} characters (${advice})`);
  } else if (distinct < MIN_ADMIN_TOKEN_DISTINCT) {
    problems.push(
      `ADMIN_TOKEN is not random enough: ${distinct} different characters, at least ${MIN_ADMIN_TOKEN_DISTINCT} needed (${advice})`,
    );
  }
  return adminToken;
}

/**
 * Reports a secret that would die with the process where data outlives it (the pepper, the escrow key,
 * the key sealing webhook secrets): in production (which also needs MongoDB) and with MongoDB in any
 * environment, a per-process one would orphan the data.
 */
function requireLastingSecrets(
  problems: string[],
  receiptsEnv: Environment,
  store: Config["store"],
  secrets: { pepperGenerated: boolean; hasEscrowKey: boolean; webhookKeyGenerated: boolean },
): void {
  const where =
    receiptsEnv === "live"
      ? "in production (RECEIPTS_ENV=live)"
      : store === "mongodb"
        ? "with STORE=mongodb"
        : "";
  if (where === "") return;
  if (secrets.pepperGenerated) problems.push(`HASHED_PAN_PEPPER is required ${where}`);
  if (!secrets.hasEscrowKey)
    problems.push(`ESCROW_PRIVATE_KEY or ESCROW_PRIVATE_KEY_FILE is required ${where}`);
  if (secrets.webhookKeyGenerated) problems.push(`WEBHOOK_SECRET_KEY is required ${where}`);
  if (receiptsEnv === "live" && store !== "mongodb") {
    problems.push("STORE=mongodb is required in production (RECEIPTS_ENV=live)");
  }
}

/** Parses `RATE_LIMIT_TIERS`, a JSON object overriding any part of the tier table. */
function parseTiers(raw: string | undefined, problems: string[]): Record<Tier, TierLimits> {
  const tiers = structuredClone(DEFAULT_TIERS);
  if (raw === undefined || raw.trim() === "") return tiers;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    problems.push("RATE_LIMIT_TIERS must be a JSON object");
    return tiers;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    problems.push("RATE_LIMIT_TIERS must be a JSON object");
    return tiers;
  }
  for (const [tier, limits] of Object.entries(parsed)) {
    if (!Object.hasOwn(tiers, tier)) {
      problems.push(`RATE_LIMIT_TIERS: unknown tier "${tier}" (tiers: ${Object.keys(tiers).join(", ")})`);
      continue;
    }
    if (typeof limits !== "object" || limits === null) {
      problems.push(`RATE_LIMIT_TIERS.${tier} must be an object`);
      continue;
    }
    for (const [field, value] of Object.entries(limits)) {
      if (field !== "requestsPerMinute" && field !== "generateKeysPerMinute") {
        problems.push(`RATE_LIMIT_TIERS.${tier}: unknown field "${field}"`);
      } else if (!Number.isSafeInteger(value) || (value as number) < 1) {
        problems.push(`RATE_LIMIT_TIERS.${tier}.${field} must be a positive integer`);
      } else {
        tiers[tier as Tier][field] = value as number;
      }
    }
  }
  return tiers;
}

/** The shortest `ADMIN_TOKEN` accepted: 32 characters, about 190 bits as base64. */
export const MIN_ADMIN_TOKEN_LENGTH = 32;

/**
 * The fewest different characters an `ADMIN_TOKEN` may have. A base64 token of 32 random bytes has
 * about 30 of its 43 characters different; a hexadecimal one can never have more than 16, so use
 * base64 (a 64-digit hex token misses a digit about one time in four and is then refused).
 */
export const MIN_ADMIN_TOKEN_DISTINCT = 16;

/**
 * The private keys of an escrow key setting: PEM blocks one after another, or base64 DER keys
 * separated by commas or white space, newest (the one that seals) first.
 */
export function splitKeys(text: string): string[] {
  const pem = text.match(/-----BEGIN [A-Z ]+-----[\s\S]*?-----END [A-Z ]+-----/g);
  if (pem !== null) return pem;
  return text.split(/[\s,]+/).filter((part) => part !== "");
}

/** Parses `FAST_PATHS`: `on` (the default), `off`, or a comma-separated list of fast paths. */
function parseFastPaths(raw: string | undefined, problems: string[]): FastPath[] {
  const text = raw?.trim() ?? "";
  if (text === "" || text === "on") return [...FAST_PATHS];
  if (text === "off") return [];
  const names = text.split(",").map((part) => part.trim());
  const unknown = names.filter((name) => !(FAST_PATHS as readonly string[]).includes(name));
  if (unknown.length > 0) {
    problems.push(
      `FAST_PATHS must be on, off or a list of ${FAST_PATHS.join(", ")} (got "${unknown.join(", ")}")`,
    );
    return [...FAST_PATHS];
  }
  for (const [path, needs] of FAST_PATH_NEEDS) {
    if (names.includes(path) && !names.includes(needs)) problems.push(`FAST_PATHS: ${path} needs ${needs}`);
  }
  return FAST_PATHS.filter((path) => names.includes(path));
}

/**
 * Parses `CORS_ORIGINS`: comma-separated origins, each `http(s)://host[:port]` with nothing after it
 * (what a browser sends in `Origin`). A wildcard is refused: name the origins that may call with keys.
 */
function parseOrigins(raw: string | undefined, problems: string[]): string[] {
  if (raw === undefined || raw.trim() === "") return [];
  const origins: string[] = [];
  for (const item of raw.split(",").map((part) => part.trim())) {
    let origin: string | undefined;
    try {
      const url = new URL(item);
      if ((url.protocol === "http:" || url.protocol === "https:") && url.origin === item) origin = url.origin;
    } catch {
      // reported below
    }
    if (origin === undefined) {
      problems.push(
        `CORS_ORIGINS: "${item}" is not an origin like http://localhost:5173 (scheme, host, port)`,
      );
    } else {
      origins.push(origin);
    }
  }
  return origins;
}

function randomSecret(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
}
