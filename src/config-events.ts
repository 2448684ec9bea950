/**
 * The configuration of events and webhooks (docs/events.md), read by `loadConfig` with the rest:
 * every variable is validated at start-up and every bad value named. The defaults are the published
 * ones of docs/events.md.
 */

/** The settings of events, webhooks and the event stream. */
export interface EventsConfig {
  /**
   * Keys that seal webhook secrets and signing keys at rest (`WEBHOOK_SECRET_KEY`: base64 of 32 random
   * bytes, several separated by commas, newest first: the first seals, all open). Generated for the
   * process when unset in development with the embedded store; required in production and with MongoDB.
   */
  secretKeys: Buffer[];
  /** True when the key was generated for this process (development only). */
  secretKeyGenerated: boolean;
  /**
   * Waits before each retry, in ms (`WEBHOOK_RETRY_SCHEDULE`, durations like `5s,5m,30m`): the first
   * attempt is immediate, then one retry per entry; after the last the delivery has failed. The default
   * is Standard Webhooks' schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h (75.6 h in all).
   */
  retryScheduleMs: number[];
  /** An endpoint failing without a success for this long is disabled (`WEBHOOK_DISABLE_AFTER`, default 5 d). */
  disableAfterMs: number;
  /** Time limit of one delivery attempt, connecting included (`WEBHOOK_TIMEOUT_MS`, default 15 000). */
  timeoutMs: number;
  /** Most response bytes read from a receiver; the rest is cut off (`WEBHOOK_RESPONSE_LIMIT_BYTES`, 64 KiB). */
  responseLimitBytes: number;
  /** Delivery attempts in flight at once on the worker (`WEBHOOK_CONCURRENCY`, default 32). */
  concurrency: number;
  /** Endpoints per tenant (`WEBHOOK_MAX_ENDPOINTS`, default 16). */
  maxEndpointsPerTenant: number;
  /** Whether this instance takes part in sequencing and delivery (`EVENTS_WORKER`, `on` or `off`). */
  worker: boolean;
  /** How often the worker and the streams look for new work in the store (`EVENTS_POLL_MS`, default 500). */
  pollMs: number;
  /** Lifetime of the worker's lease; it is renewed at a third of it (`EVENTS_LEASE_MS`, default 15 000). */
  leaseMs: number;
  /** How long events and finished deliveries are kept (`EVENTS_RETENTION_DAYS`, default 7). */
  retentionDays: number;
  /** Heartbeat interval of an idle WatchEvents stream (`WATCH_HEARTBEAT_MS`, default 15 000). */
  heartbeatMs: number;
  /** WatchEvents streams open at once per API key on one instance (`WATCH_STREAMS_PER_KEY`, default 8). */
  streamsPerKey: number;
}

/** Standard Webhooks' example schedule: the waits before retries 1-9. */
export const DEFAULT_RETRY_SCHEDULE = "5s,5m,30m,2h,5h,10h,14h,20h,24h";

/** What the events reader needs from `loadConfig`'s reader. */
export interface EventsSettings {
  env: NodeJS.ProcessEnv;
  problems: string[];
  int(name: string, fallback: number, min: number, max: number): number;
  oneOf<T extends string>(name: string, allowed: readonly string[], fallback: T): T;
}

const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Milliseconds of a duration like `250ms`, `5s`, `30m`, `2h`, `5d`; undefined when it is not one. */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d{1,9})(ms|s|m|h|d)$/.exec(text.trim());
  if (match === null) return undefined;
  return Number(match[1]) * (UNITS[match[2] as string] as number);
}

/** Reads the events settings; problems go to `settings.problems`. */
export function readEventsConfig(settings: EventsSettings): EventsConfig {
  const { env, problems, int, oneOf } = settings;
  const keys = readSecretKeys(env.WEBHOOK_SECRET_KEY, problems);
  return {
    secretKeys: keys ?? [randomKey()],
    secretKeyGenerated: keys === undefined,
    retryScheduleMs: readSchedule(env.WEBHOOK_RETRY_SCHEDULE, problems),
    disableAfterMs: readDuration(env, problems, "WEBHOOK_DISABLE_AFTER", "5d"),
    timeoutMs: int("WEBHOOK_TIMEOUT_MS", 15_000, 100, 120_000),
    responseLimitBytes: int("WEBHOOK_RESPONSE_LIMIT_BYTES", 65_536, 1_024, 1_048_576),
    concurrency: int("WEBHOOK_CONCURRENCY", 32, 1, 1_024),
    maxEndpointsPerTenant: int("WEBHOOK_MAX_ENDPOINTS", 16, 1, 1_000),
    worker: oneOf("EVENTS_WORKER", ["on", "off"], "on") === "on",
    pollMs: int("EVENTS_POLL_MS", 500, 10, 60_000),
    leaseMs: int("EVENTS_LEASE_MS", 15_000, 300, 600_000),
    retentionDays: int("EVENTS_RETENTION_DAYS", 7, 1, 3_650),
    heartbeatMs: int("WATCH_HEARTBEAT_MS", 15_000, 100, 600_000),
    streamsPerKey: int("WATCH_STREAMS_PER_KEY", 8, 1, 1_000),
  };
}

/** `WEBHOOK_SECRET_KEY`: base64 keys of 32 bytes, newest first; undefined when unset. */
function readSecretKeys(raw: string | undefined, problems: string[]): Buffer[] | undefined {
  if (raw === undefined || raw.trim() === "") return undefined;
  const keys: Buffer[] = [];
  for (const [i, part] of raw.split(",").entries()) {
    const text = part.trim();
    const key = /^[A-Za-z0-9+/_-]+={0,2}$/.test(text) ? Buffer.from(text, "base64") : Buffer.alloc(0);
    if (key.length !== 32) {
      // Never the value itself: it is a secret.
      problems.push(
        `WEBHOOK_SECRET_KEY: key ${i + 1} must be base64 of 32 random bytes (e.g. openssl rand -base64 32)`,
      );
    } else {
      keys.push(key);
    }
  }
  return keys.length > 0 ? keys : undefined;
}

function readSchedule(raw: string | undefined, problems: string[]): number[] {
  const text = raw === undefined || raw.trim() === "" ? DEFAULT_RETRY_SCHEDULE : raw;
  const waits = text.split(",").map((part) => parseDuration(part));
  if (waits.length > 30 || waits.some((ms) => ms === undefined)) {
    problems.push(
      `WEBHOOK_RETRY_SCHEDULE must be at most 30 durations like 5s,5m,2h separated by commas (got "${text}")`,
    );
    return (DEFAULT_RETRY_SCHEDULE.split(",").map(parseDuration) as number[]).slice();
  }
  return waits as number[];
}

function readDuration(env: NodeJS.ProcessEnv, problems: string[], name: string, fallback: string): number {
  const raw = env[name];
  const text = raw === undefined || raw.trim() === "" ? fallback : raw;
  const ms = parseDuration(text);
  if (ms === undefined || ms < 1) {
    problems.push(`${name} must be a duration like 250ms, 30s, 5m, 2h or 5d (got "${text}")`);
    return parseDuration(fallback) as number;
  }
  return ms;
}

function randomKey(): Buffer {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(32)));
}
