import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { counterNames } from "../../src/domain/rate-limit.js";

/**
 * The rate limiter's counter names are remembered per subject, so that each call hands the counters
 * the same string. Whatever the order of subjects, and after the memory starts again from none, every
 * name must be the one the template makes for its own subject: two callers never share a counter.
 */
describe("counterNames", () => {
  it("names every subject as the template does, in any order, past its memory's bound", () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.constantFrom("127.0.0.1", "::1", "key_1", "", "a:b"), fc.string()), {
          minLength: 1,
          maxLength: 60,
        }),
        fc.integer({ min: 1, max: 5 }),
        (subjects, max) => {
          const made: string[] = [];
          const name = counterNames((subject) => {
            made.push(subject);
            return `ip:${subject}:kt`;
          }, max);
          for (const subject of subjects) expect(name(subject)).toBe(`ip:${subject}:kt`);
          // Each distinct subject is named at most once between two clearings: never more often than asked.
          expect(made.length).toBeLessThanOrEqual(subjects.length);
        },
      ),
    );
  });

  it("hands out the same string again for a subject it remembers", () => {
    const name = counterNames((id) => `${id}:all`);
    const first = name("key_1");
    expect(name("key_2")).toBe("key_2:all");
    expect(name("key_1")).toBe(first);
    let made = 0;
    const counted = counterNames((id) => {
      made++;
      return `${id}:all`;
    }, 2);
    for (const id of ["a", "b", "a", "b", "a"]) counted(id);
    expect(made).toBe(2);
    // A third subject drops the remembered two; the names stay right.
    expect(counted("c")).toBe("c:all");
    expect(counted("a")).toBe("a:all");
    expect(made).toBe(4);
  });
});
