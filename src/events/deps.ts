import type { Logger } from "pino";
import type { Clock } from "../clock.js";
import type { EventsConfig } from "../config-events.js";
import type { RandomBytes } from "../domain/gateways/gateway.js";
import type { Environment, Store } from "../store/types.js";
import type { EventHub } from "./hub.js";
import type { SecretBox } from "./secret-box.js";
import type { ResolveAll } from "./ssrf.js";

/** What the events modules need, passed in explicitly like the domain's `DomainDeps`. */
export interface EventsDeps {
  store: Store;
  clock: Clock;
  /** Randomness of the retry jitter: the CSPRNG unless a test pins it. */
  random: RandomBytes;
  logger: Logger;
  config: EventsConfig;
  /** The server's environment: `dev` allows http and private addresses for receivers on this machine. */
  env: Environment;
  /** Seals and opens webhook secrets and signing keys (`WEBHOOK_SECRET_KEY`). */
  box: SecretBox;
  hub: EventHub;
  /** Resolves receivers' host names (the system resolver unless a test injects one). */
  resolve?: ResolveAll | undefined;
  /** Aborted when the service shuts down: open streams end, asking clients to resume elsewhere. */
  shutdown: AbortSignal;
  /** WatchEvents streams open on this instance, per API key id (for `streamsPerKey`). */
  openStreams: Map<string, number>;
}

/** Whether receivers on private addresses and plain http are allowed: in development only. */
export function allowsPrivateReceivers(deps: Pick<EventsDeps, "env">): boolean {
  return deps.env === "dev";
}
