import { create } from "@bufbuild/protobuf";
import { type Event, EventSchema } from "../../gen/receipts/v1/events_pb.js";
import { type WebhookDelivery, WebhookDeliverySchema } from "../../gen/receipts/v1/webhooks_pb.js";
import { timestampOf } from "../rpc/convert.js";
import { messageToJson } from "../rpc/json-codec.js";
import type { DeliveryRecord, SequencedEvent } from "../store/event-types.js";
import type { EventRecord } from "./types.js";

/**
 * Events and deliveries as the API shows them. A webhook's body is the JSON of the same `Event`
 * message that ListEvents and WatchEvents carry (REST conventions: lowerCamelCase, RFC 3339 times), so
 * a consumer reads one shape whichever way the event reached it.
 */

/** An event as the `Event` message. */
export function eventMessageOf(event: EventRecord): Event {
  const { createdAt, ...ids } = event.data;
  return create(EventSchema, {
    id: event.id,
    type: event.type,
    timestamp: timestampOf(event.createdAt),
    data: { ...ids, ...(createdAt === undefined ? {} : { createdAt: timestampOf(createdAt) }) },
  });
}

/** The body of a webhook for `event`: `{"id", "type", "timestamp", "data"}`, compact JSON. */
export function webhookBodyOf(event: EventRecord): string {
  return JSON.stringify(messageToJson(EventSchema, eventMessageOf(event)));
}

/** A delivery as the `WebhookDelivery` message. */
export function deliveryMessageOf(d: DeliveryRecord): WebhookDelivery {
  return create(WebhookDeliverySchema, {
    endpointId: d.endpointId,
    eventId: d.eventId,
    eventType: d.eventType,
    status: d.status,
    attempts: d.attempts,
    createdAt: timestampOf(d.createdAt),
    ...(d.nextAttemptAt === undefined ? {} : { nextAttemptAt: timestampOf(d.nextAttemptAt) }),
    ...(d.deliveredAt === undefined ? {} : { deliveredAt: timestampOf(d.deliveredAt) }),
    attemptLog: d.log.map((a) => ({
      at: timestampOf(a.at),
      statusCode: a.statusCode,
      error: a.error,
      durationMs: a.durationMs,
    })),
  });
}

/** Re-exported for the feed, which answers sequenced events. */
export type { SequencedEvent };
