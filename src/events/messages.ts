import { create } from "@bufbuild/protobuf";
import { type Event, EventSchema } from "../../gen/receipts/v1/events_pb.js";
import { type WebhookDelivery, WebhookDeliverySchema } from "../../gen/receipts/v1/webhooks_pb.js";
import type { EventRecord } from "../domain/event-types.js";
import { timestampJson, timestampOf } from "../proto-scalars.js";
import type { DeliveryRecord, EventData, SequencedEvent } from "../store/event-types.js";

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

/** `EventData`'s fields but `createdAt`, in the message's field order (the order its JSON follows). */
const DATA_FIELDS = [
  "userId",
  "receiptId",
  "merchantId",
  "paymentId",
  "transactionId",
  "keyIdBefore",
  "keyIdAfter",
  "version",
  "escrowRef",
  "cardBin",
  "refundId",
] as const satisfies readonly (keyof EventData)[];

/**
 * The body of a webhook for `event`: `{"id", "type", "timestamp", "data"}`, compact JSON, the same
 * text as the JSON of {@link eventMessageOf} (test/events/messages.test.ts compares them for every
 * field), written directly: every delivery builds one, and the message and its reflection cost about
 * 14 us of the event's CPU, this about 2.
 */
export function webhookBodyOf(event: EventRecord): string {
  const { data } = event;
  let fields = "";
  for (const name of DATA_FIELDS) {
    const value = data[name];
    if (value !== undefined && value !== null) fields += `,"${name}":${JSON.stringify(value)}`;
  }
  if (data.createdAt !== undefined) fields += `,"createdAt":"${timeJson(data.createdAt)}"`;
  return `{"id":${JSON.stringify(event.id)},"type":${JSON.stringify(event.type)},"timestamp":"${timeJson(event.createdAt)}","data":{${fields.slice(1)}}}`;
}

const MIN_TIME_MS = Date.parse("0001-01-01T00:00:00Z");
const MAX_TIME_MS = Date.parse("9999-12-31T23:59:59.999Z");

/** A time as protobuf JSON writes a Timestamp of whole milliseconds: no fraction when there are none. */
function timeJson(at: Date): string {
  const ms = at.getTime();
  if (!(ms >= MIN_TIME_MS && ms <= MAX_TIME_MS)) return timestampJson(timestampOf(at));
  const iso = at.toISOString();
  return ms % 1000 === 0 ? `${iso.slice(0, -5)}Z` : iso;
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
