import type { ServiceImpl } from "@connectrpc/connect";
import type { EventsService } from "../../../gen/receipts/v1/events_pb.js";
import type { EventsDeps } from "../../events/deps.js";
import { listEvents, watchEvents } from "../../events/feed.js";
import { eventMessageOf } from "../../events/messages.js";
import { timestampOf } from "../../proto-scalars.js";
import { principalOf } from "../convert.js";

/** EventsService: the pull feed and the server stream of a tenant's events, adapted to src/events. */
export function eventsService(deps: EventsDeps): ServiceImpl<typeof EventsService> {
  return {
    async listEvents(req, ctx) {
      const page = await listEvents(deps, principalOf(ctx), req);
      return {
        events: page.events.map(eventMessageOf),
        lastEventId: page.lastEventId,
        hasMore: page.hasMore,
      };
    },
    async *watchEvents(req, ctx) {
      for await (const item of watchEvents(deps, principalOf(ctx), req, ctx.signal)) {
        yield "event" in item
          ? { event: eventMessageOf(item.event) }
          : { heartbeat: timestampOf(item.heartbeat) };
      }
    },
  };
}
