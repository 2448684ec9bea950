import type { Logger } from "pino";
import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import { type RandomBytes, systemRandomBytes } from "../domain/gateways/gateway.js";
import type { Store } from "../store/types.js";
import type { EventsDeps } from "./deps.js";
import { EventHub } from "./hub.js";
import { SecretBox } from "./secret-box.js";
import { type ResolveAll, systemResolver } from "./ssrf.js";
import { EventWorker } from "./worker.js";

/**
 * Events and webhooks of one instance (docs/events.md): the dependencies the RPCs use, and the worker
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
  random?: RandomBytes | undefined;
}): Events {
  const { config } = options;
  const shutdown = new AbortController();
  const deps: EventsDeps = {
    store: options.store,
    clock: options.clock,
    random: options.random ?? systemRandomBytes,
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
  // Events written through this process wake its worker at once (others' within the poll interval).
  options.store.events.onWritten(() => deps.hub.written());
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
