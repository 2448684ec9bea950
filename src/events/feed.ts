import { EVENT_TYPES, eventTypesFor, isEventType } from "../domain/event-types.js";
import { AppError, Violations } from "../errors.js";
import type { SequencedEvent } from "../store/event-types.js";
import type { ApiKeyRecord } from "../store/types.js";
import type { EventsDeps } from "./deps.js";

/**
 * The pull feed and the stream of a tenant's events (docs/events.md). Both read the feed in position
 * order: the sequencer gives positions in the order events become visible (see the store contract), so
 * "everything after the last position I saw" never skips an event, whichever instance wrote it.
 */

/** Default and largest page of ListEvents. */
export const EVENTS_PAGE = { default: 50, max: 200 } as const;

/** Events a stream reads from the store at a time: all a slow reader can make the server hold. */
export const STREAM_PAGE = 100;

/** A page of the feed. */
export interface EventsPage {
  events: SequencedEvent[];
  /** The id to pass as `after` next: the last event's, or the given `after` when none came. */
  lastEventId: string;
  hasMore: boolean;
}

/** The tenant's events after the event `after` (from the oldest kept when empty), oldest first. */
export async function listEvents(
  deps: EventsDeps,
  principal: ApiKeyRecord,
  input: { after: string; pageSize: number },
): Promise<EventsPage> {
  const v = new Violations();
  if (input.pageSize < 0 || input.pageSize > EVENTS_PAGE.max) {
    v.add("pageSize", `must be from 1 to ${EVENTS_PAGE.max}`);
  }
  if (input.after.length > 128) v.add("after", "is not an event id");
  v.throwIfAny();
  const size = input.pageSize || EVENTS_PAGE.default;
  const from = await positionAfter(deps, principal, input.after);
  const found = await deps.store.events.listForTenant(principal.tenantId, from, size + 1);
  const events = found.slice(0, size);
  return { events, lastEventId: events.at(-1)?.id ?? input.after, hasMore: found.length > size };
}

/** The position of the tenant's event `after`; 0 for "" (the start). Another tenant's id is `not_found`. */
async function positionAfter(deps: EventsDeps, principal: ApiKeyRecord, after: string): Promise<number> {
  if (after === "") return 0;
  const event = await deps.store.events.findForTenant(principal.tenantId, after);
  if (event === undefined) {
    throw new AppError("not_found", "No such event for this tenant (it may be older than the retention).", {
      violations: [{ field: "after", description: "is not an event of this tenant that is still kept" }],
    });
  }
  return event.seq;
}

/** What a stream sends: the next event, or a heartbeat while nothing happens. */
export type StreamItem = { event: SequencedEvent } | { heartbeat: Date };

/**
 * The tenant's events after `after` (from now when empty), then each new one as it is sequenced, with
 * a heartbeat every `heartbeatMs` of silence; ends when `signal` aborts (the client went away). Pulled
 * by the transport one item at a time as the client takes them (connect-node waits for the socket to
 * drain before asking for the next), and reading at most {@link STREAM_PAGE} events ahead: a slow
 * reader holds one page of the server's memory, never more. When the service shuts down the stream
 * ends with `service_unavailable`: resume after the last event id, on any instance.
 */
export async function* watchEvents(
  deps: EventsDeps,
  principal: ApiKeyRecord,
  input: { after: string; types: readonly string[] },
  signal: AbortSignal,
): AsyncGenerator<StreamItem> {
  const v = new Violations();
  // As when subscribing an endpoint: types of the caller's role only (a merchant gets no issuer events).
  const allowed = eventTypesFor(principal.role).join(", ");
  input.types.forEach((type, i) => {
    if (!isEventType(type)) v.add(`types[${i}]`, `is not an event type (${allowed})`);
    else if (EVENT_TYPES[type].role !== principal.role) {
      v.add(`types[${i}]`, `is not sent to ${principal.role} tenants (${allowed})`);
    }
  });
  if (new Set(input.types).size !== input.types.length) v.add("types", "must not repeat a type");
  if (input.after.length > 128) v.add("after", "is not an event id");
  v.throwIfAny();
  const wanted = new Set(input.types);
  const openStreams = deps.openStreams;
  const open = openStreams.get(principal.id) ?? 0;
  if (open >= deps.config.streamsPerKey) {
    throw new AppError(
      "rate_limit_exceeded",
      `At most ${deps.config.streamsPerKey} event streams per API key at a time.`,
      { retryAfterSeconds: 5 },
    );
  }
  openStreams.set(principal.id, open + 1);
  try {
    let position =
      input.after === ""
        ? await deps.store.events.lastSeq()
        : await positionAfter(deps, principal, input.after);
    let quietSince = Date.now();
    // The first message goes out at once (an event, or a heartbeat when none waits): the client
    // knows the stream is open.
    let opened = false;
    while (!signal.aborted) {
      if (deps.shutdown.aborted) {
        throw new AppError(
          "service_unavailable",
          "The server is shutting down: resume after the last event id.",
        );
      }
      const page = await deps.store.events.listForTenant(principal.tenantId, position, STREAM_PAGE);
      for (const event of page) {
        position = event.seq;
        if (wanted.size > 0 && !wanted.has(event.type)) continue;
        yield { event };
        opened = true;
        quietSince = Date.now();
      }
      if (page.length === STREAM_PAGE) continue;
      const quietFor = Date.now() - quietSince;
      if (!opened || quietFor >= deps.config.heartbeatMs) {
        yield { heartbeat: deps.clock.now() };
        opened = true;
        quietSince = Date.now();
        continue;
      }
      const wait = Math.min(deps.config.pollMs, deps.config.heartbeatMs - quietFor);
      await deps.hub.untilSequenced(wait, AbortSignal.any([signal, deps.shutdown]));
    }
  } finally {
    const left = (openStreams.get(principal.id) ?? 1) - 1;
    if (left <= 0) openStreams.delete(principal.id);
    else openStreams.set(principal.id, left);
  }
}
