import { describe, expect, it } from "vitest";
import { EventSchema } from "../../gen/receipts/v1/events_pb.js";
import { ALL_EVENT_TYPES, type EventRecord } from "../../src/domain/event-types.js";
import { eventMessageOf, webhookBodyOf } from "../../src/events/messages.js";
import { messageToJson } from "../../src/rpc/json-codec.js";

/**
 * A webhook's body is written directly (src/events/messages.ts), and must be exactly the JSON of the
 * `Event` message that ListEvents and WatchEvents carry: the same fields, order, omissions and times.
 */

const viaMessage = (event: EventRecord) => JSON.stringify(messageToJson(EventSchema, eventMessageOf(event)));

const times = [
  new Date("2026-11-26T13:42:37.041Z"),
  new Date("2026-11-26T13:42:37.000Z"),
  new Date("2026-01-02T03:04:05.100Z"),
  new Date("1969-12-31T23:59:59.000Z"),
  new Date("0001-01-01T00:00:00.000Z"),
  new Date("9999-12-31T23:59:59.999Z"),
];

describe("a webhook's body", () => {
  it("is the JSON of the Event message for every type, field and kind of time", () => {
    const full = {
      userId: "usr_1",
      receiptId: "rcp_2",
      merchantId: 'm_"quoted" \\ \u00e9 \u2028',
      paymentId: "pay_3",
      transactionId: "txn_4",
      keyIdBefore: "k_5",
      keyIdAfter: "k_6",
      version: 7,
      escrowRef: "esc_8",
      cardBin: "411111",
      refundId: "ref_9",
    };
    const names = Object.keys(full) as (keyof typeof full)[];
    let compared = 0;
    for (const type of ALL_EVENT_TYPES) {
      for (const [i, at] of times.entries()) {
        const subsets = [
          full,
          {},
          { version: 0, userId: "" },
          Object.fromEntries(names.filter((_, j) => (j + i) % 2 === 0).map((n) => [n, full[n]])),
        ];
        for (const data of subsets) {
          for (const createdAt of [undefined, at]) {
            const event: EventRecord = {
              id: `evt_${i}`,
              type,
              tenantId: "t",
              createdAt: at,
              data: createdAt === undefined ? data : { ...data, createdAt },
            };
            expect(webhookBodyOf(event), `${type} ${at.toISOString()}`).toBe(viaMessage(event));
            compared++;
          }
        }
      }
    }
    expect(compared).toBe(ALL_EVENT_TYPES.length * times.length * 8);
    // The data keeps the message's field order whatever the record's order.
    const reversed = Object.fromEntries(Object.entries(full).reverse());
    const event: EventRecord = {
      id: "evt_r",
      type: "key.changed",
      tenantId: "t",
      createdAt: times[0] as Date,
      data: reversed,
    };
    expect(webhookBodyOf(event)).toBe(viaMessage(event));
    expect(JSON.parse(webhookBodyOf(event))).toMatchObject({
      id: "evt_r",
      timestamp: "2026-11-26T13:42:37.041Z",
    });
  });
});
