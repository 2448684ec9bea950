import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ALL_EVENT_TYPES } from "../../src/domain/event-types.js";
import type { EventData, SequencedEvent } from "../../src/store/event-types.js";
import { copy } from "../../src/store/memory/copy.js";
import { eventCopy } from "../../src/store/memory/events.js";
import { objectsOf, shapeOf } from "./copy-shapes.js";

/**
 * The memory event store copies events by hand (`eventCopy`) instead of with the generic deep copy:
 * it must give what the generic copy gives, member for member and in the same order, and share no
 * object with the original. The arbitraries name every member of an event and of its data (typed so
 * that a member added to either fails to compile here until it is generated), so a member the hand
 * copy would share is found.
 */

const date = fc.date({ noInvalidDate: true });
const text = fc.string({ maxLength: 20 });

const dataMembers: { [K in keyof EventData]-?: fc.Arbitrary<NonNullable<EventData[K]>> } = {
  userId: text,
  receiptId: text,
  merchantId: text,
  paymentId: text,
  transactionId: text,
  keyIdBefore: text,
  keyIdAfter: text,
  version: fc.integer(),
  escrowRef: text,
  cardBin: text,
  refundId: text,
  createdAt: date,
};

const eventMembers: { [K in keyof SequencedEvent]-?: fc.Arbitrary<SequencedEvent[K]> } = {
  id: text,
  type: fc.constantFrom(...ALL_EVENT_TYPES),
  tenantId: text,
  createdAt: date,
  data: fc.record(dataMembers, { requiredKeys: [] }) as fc.Arbitrary<EventData>,
  seq: fc.nat(),
};

/** Sequenced events, and events not sequenced yet (no `seq`), their members in any order. */
const events = fc.tuple(fc.record(eventMembers), fc.boolean()).chain(([event, sequenced]) => {
  const keys = Object.keys(event).filter((key) => sequenced || key !== "seq");
  return fc
    .shuffledSubarray(keys, { minLength: keys.length })
    .map((order) => Object.fromEntries(order.map((key) => [key, event[key as keyof SequencedEvent]])))
    .map((reordered) => reordered as unknown as SequencedEvent);
});

describe("memory event store copy", () => {
  it("gives what the generic copy gives, members in the same order, sharing nothing", () => {
    fc.assert(
      fc.property(events, (event) => {
        const ours = eventCopy(event);
        const generic = copy(event);
        expect(ours).toEqual(generic);
        expect(shapeOf(ours)).toEqual(shapeOf(generic));
        expect(shapeOf(ours)).toEqual(shapeOf(event));
        const original = objectsOf(event);
        for (const object of objectsOf(ours)) expect(original.has(object)).toBe(false);
      }),
      { numRuns: 500 },
    );
  });
});
