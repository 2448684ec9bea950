import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import { requestIdFrom } from "../../src/rpc/request-id.js";

/**
 * `requestIdFrom` remembers the last id it gave, so the second look at the same request's id skips the
 * pattern. Whatever came before, each answer must be the rule's: a sane header as it is, anything
 * else (missing, empty, repeated, too long, odd characters) a new UUID, never one given before.
 */

const SANE = /^[A-Za-z0-9._:-]{1,128}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

const saneIds = fc.stringMatching(SANE);
const headers = fc.oneof(
  saneIds,
  fc.string({ maxLength: 140 }),
  fc.constantFrom(undefined, null, "", " ", "a".repeat(129), "id with spaces"),
  fc.array(saneIds, { minLength: 1, maxLength: 2 }),
);

describe("requestIdFrom", () => {
  it("gives the rule's answer for every header, after any other", () => {
    fc.assert(
      fc.property(fc.array(headers, { minLength: 1, maxLength: 12 }), fc.nat(2), (sent, repeats) => {
        const given = new Set<string>();
        for (const header of sent) {
          for (let i = 0; i <= repeats; i++) {
            const id = requestIdFrom(header);
            if (typeof header === "string" && SANE.test(header)) {
              expect(id).toBe(header);
            } else {
              expect(id).toMatch(UUID);
              expect(given.has(id)).toBe(false);
            }
            given.add(id);
          }
        }
      }),
    );
  });

  it("gives a new id to every request without one, also right after an id was given", () => {
    const first = requestIdFrom("abc");
    expect(first).toBe("abc");
    const ids = [undefined, undefined, "", "", null, ["abc"]].map((header) => requestIdFrom(header));
    for (const id of ids) expect(id).toMatch(UUID);
    expect(new Set(ids).size).toBe(ids.length);
    // An id read back (as the chain reads the one Fastify wrote into the headers) is kept.
    expect(requestIdFrom(ids[5])).toBe(ids[5]);
  });

  it("gives a new id to an empty or missing header as the first question of a fresh process", async () => {
    for (const header of ["", undefined, null]) {
      vi.resetModules();
      const fresh = await import("../../src/rpc/request-id.js");
      expect(fresh.requestIdFrom(header)).toMatch(UUID);
    }
  });
});
