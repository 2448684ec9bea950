import type { Logger } from "pino";
import { AppError } from "../errors.js";
import { LOCAL_STORE_METHODS } from "./event-types.js";
import { isMemoryStore } from "./memory/index.js";
import type { Store } from "./types.js";

/** Options of {@link startStore}. */
export interface StoreStartupOptions {
  logger: Pick<Logger, "info" | "warn">;
  /** Wait before the first retry of a failed `init`, in ms; it doubles per failure. Default 500. */
  initialDelayMs?: number;
  /** Longest wait between retries, in ms. Default 30 000. */
  maxDelayMs?: number;
  /** Jitter source, [0, 1); injected by tests. Default `Math.random`. */
  random?: () => number;
}

/** A store being initialised in the background; see {@link startStore}. */
export interface StoreStartup {
  /**
   * The store, refusing every call (and `ping`, so `/readyz` says 503) with `service_unavailable`
   * until `init` has succeeded; afterwards the store itself. Its `close` also stops the retries.
   */
  readonly store: Store;
  /** Whether `init` has succeeded. */
  isReady(): boolean;
  /** Resolves once `init` has succeeded; never rejects (tests and tools await it). */
  whenReady(): Promise<void>;
  /** Stops retrying (shutdown); an attempt in flight finishes but schedules no other. Idempotent. */
  stop(): void;
}

/**
 * Initialises `store` (connect, create indexes) in the background, retrying with capped, jittered
 * exponential backoff until it succeeds or {@link StoreStartup.stop} is called, and logging every
 * failure. So the service starts, and answers `/healthz`, while its database is down: `/readyz` and
 * every request answer 503 `service_unavailable` until the store is reachable and its indexes exist
 * (writes before the unique indexes exist could store duplicates), then the service is ready by itself.
 */
export function startStore(backend: Store, options: StoreStartupOptions): StoreStartup {
  const initialDelayMs = options.initialDelayMs ?? 500;
  const maxDelayMs = options.maxDelayMs ?? 30_000;
  const random = options.random ?? Math.random;
  let ready = false;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let markReady: () => void = () => {};
  const readyPromise = new Promise<void>((resolve) => {
    markReady = resolve;
  });

  const attempt = (n: number): void => {
    backend.init().then(
      () => {
        ready = true;
        markReady();
        if (n > 1) options.logger.info({ attempts: n }, "store initialised: the service is ready");
      },
      (err: unknown) => {
        if (stopped) return;
        const delayMs = retryDelayMs(n, initialDelayMs, maxDelayMs, random);
        options.logger.warn(
          { err, attempt: n, retryInMs: delayMs },
          "store initialisation failed; not ready, retrying",
        );
        timer = setTimeout(() => {
          timer = undefined;
          if (!stopped) attempt(n + 1);
        }, delayMs);
        // Shutdown must not wait for the next attempt.
        timer.unref();
      },
    );
  };

  const stop = () => {
    stopped = true;
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
  };

  const store = gatedStore(backend, () => ready, stop);
  attempt(1);
  return { store, isReady: () => ready, whenReady: () => readyPromise, stop };
}

/**
 * The wait after failed attempt `n` (from 1), in ms: `initialDelayMs` doubled per earlier failure, at
 * most `maxDelayMs`, then scaled by a random factor in [0.5, 1) so that restarted replicas spread out.
 */
function retryDelayMs(n: number, initialDelayMs: number, maxDelayMs: number, random: () => number): number {
  const base = Math.min(maxDelayMs, initialDelayMs * 2 ** Math.min(n - 1, 30));
  return Math.round(base * (0.5 + random() / 2));
}

/**
 * `backend` behind a gate: every repository method, and `ping`, is refused while `isReady()` is false
 * and is the backend's own afterwards. `close` calls `stop` before closing the backend.
 */
function gatedStore(backend: Store, isReady: () => boolean, stop: () => void): Store {
  const gate = <T extends object>(repository: T): T =>
    new Proxy(repository, {
      get(target, property, receiver) {
        const value: unknown = Reflect.get(target, property, receiver);
        if (typeof value !== "function") return value;
        if (LOCAL_STORE_METHODS.has(property)) return value.bind(target);
        return (...args: unknown[]) => (isReady() ? value.apply(target, args) : notReady());
      },
    });

  const repositories = Object.fromEntries(
    Object.entries(backend).map(([name, member]: [string, unknown]) => [
      name,
      typeof member === "object" && member !== null ? gate(member) : member,
    ]),
  ) as unknown as Store;

  return {
    ...repositories,
    kind: backend.kind,
    init: () => backend.init(),
    ping: () => (isReady() ? backend.ping() : notReady()),
    close: () => {
      stop();
      return backend.close();
    },
  };
}

/** The refusal of a store that is not initialised yet: 503 `service_unavailable`. */
function notReady(): Promise<never> {
  return Promise.reject(
    new AppError("service_unavailable", "The store is unavailable.", {
      cause: new Error("The store is not initialised yet."),
    }),
  );
}

/**
 * The store `main` serves with: the memory store initialised at once (its init cannot fail, and it
 * stays unwrapped, so the app knows it for what it is), any other store initialising in the background
 * ({@link startStore}). Resolves without waiting for the database, so a service starts while it is down.
 */
export async function openStore(backend: Store, options: StoreStartupOptions): Promise<Store> {
  if (isMemoryStore(backend)) {
    await backend.init();
    return backend;
  }
  return startStore(backend, options).store;
}
