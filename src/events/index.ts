import type { Logger } from "pino";
import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { Store } from "../store/types.js";
import type { EventsDeps } from "./deps.js";
import { EventHub } from "./hub.js";
import { SecretBox } from "./secret-box.js";
import { type ResolveAll, systemResolver } from "./ssrf.js";
import { EventWorker } from "./worker.js";

/**
 * Events and webhooks of one instance (SPEC section 22): the dependencies the RPCs use, and the worker
 * that sequences and delivers while this instance holds the lease (`EVENTS_WORKER=off` leaves that to
 * other instances).
 */
export interface Events {
  deps: EventsDeps;
  /** Undefined when `EVENTS_WORKER=off`. */
  worker: EventWorker | undefined;
  start(): void;
  /** Ends the open streams, stops the worker (handing its lease over); idempotent. */
  stop(): Promise<void>;
}

export function createEvents(options: {
  store: Store;
  clock: Clock;
  logger: Logger;
  config: Config;
  resolve?: ResolveAll | undefined;
}): Events {
  const { config } = options;
  const shutdown = new AbortController();
  const deps: EventsDeps = {
    store: options.store,
    clock: options.clock,
    logger: options.logger,
    config: config.events,
    env: config.env,
    box: new SecretBox(config.events.secretKeys),
    hub: new EventHub(),
    resolve: options.resolve ?? systemResolver,
    shutdown: shutdown.signal,
    openStreams: new Map(),
  };
  const worker = config.events.worker ? new EventWorker(deps) : undefined;
  let stopping: Promise<void> | undefined;
  return {
    deps,
    worker,
    start: () => worker?.start(),
    stop() {
      shutdown.abort();
      stopping ??= worker?.stop() ?? Promise.resolve();
      return stopping;
    },
  };
}

/**
 * The store operations that write events (section 22's outbox), by repository. After one settles,
 * {@link withEventWakeups} wakes this instance's worker, so an event goes out at once rather than at the
 * worker's next poll. An operation missing here loses nothing: its events go out within `EVENTS_POLL_MS`.
 */
const WRITES_EVENTS: Readonly<Record<string, ReadonlySet<string>>> = {
  receipts: new Set(["insert", "release"]),
  payments: new Set(["createWithReceipt"]),
  users: new Set(["register", "erase"]),
  events: new Set(["append"]),
};

/** `store`, with `wake` called after each operation that writes events (whatever its outcome). */
export function withEventWakeups(store: Store, wake: () => void): Store {
  const wrapped: Record<string, unknown> = { ...store };
  for (const [name, methods] of Object.entries(WRITES_EVENTS)) {
    const repository = (store as unknown as Record<string, object>)[name];
    if (repository === undefined) continue;
    const cache = new Map<PropertyKey, (...args: unknown[]) => Promise<unknown>>();
    wrapped[name] = new Proxy(repository, {
      get(target, property, receiver) {
        const value: unknown = Reflect.get(target, property, receiver);
        if (typeof value !== "function" || typeof property !== "string" || !methods.has(property))
          return value;
        let wrapper = cache.get(property);
        if (wrapper === undefined) {
          wrapper = (...args: unknown[]) =>
            (value as (...a: unknown[]) => Promise<unknown>).apply(target, args).finally(wake);
          cache.set(property, wrapper);
        }
        return wrapper;
      },
    });
  }
  return wrapped as unknown as Store;
}
