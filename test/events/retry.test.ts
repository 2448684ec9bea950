import { afterEach, describe, expect, it } from "vitest";
import { nextAttemptAt, unitInterval } from "../../src/events/retry.js";
import { startService } from "../support/harness.js";
import { FAST_EVENTS, type Receiver, startReceiver, until } from "./support.js";
import { createEndpoint, registerCard } from "./support-flow.js";

/**
 * The retry schedule's jitter draws on the service's injected randomness (never `Math.random`), so a
 * test pins it: here to its extremes, where the wait is exactly the schedule's or a tenth more.
 */

/** A source that answers `byte` repeated, and counts the bytes asked. */
function constant(byte: number) {
  const source = (size: number) => {
    source.asked += size;
    return new Uint8Array(size).fill(byte);
  };
  source.asked = 0;
  return source;
}

const AT = new Date("2026-11-25T10:00:00.000Z");

describe("nextAttemptAt", () => {
  it("waits the schedule's step plus the jitter the injected source draws", () => {
    const schedule = [10_000, 300_000];
    expect(nextAttemptAt(schedule, { attemptsBefore: 0, gone: false }, AT, constant(0))).toEqual(
      new Date(AT.getTime() + 10_000),
    );
    // All ones: just under a tenth more.
    expect(nextAttemptAt(schedule, { attemptsBefore: 1, gone: false }, AT, constant(0xff))).toEqual(
      new Date(AT.getTime() + 300_000 + 29_999),
    );
    // 0x80000000 / 2^32 = one half of the tenth.
    const half = (size: number) => Uint8Array.from({ length: size }, (_, i) => (i === 0 ? 0x80 : 0));
    expect(nextAttemptAt(schedule, { attemptsBefore: 0, gone: false }, AT, half)).toEqual(
      new Date(AT.getTime() + 10_500),
    );
  });

  it("honours a longer Retry-After, and stops after the last step or on Gone", () => {
    const schedule = [10_000];
    const asked = { attemptsBefore: 0, gone: false, retryAfterSeconds: 60 };
    expect(nextAttemptAt(schedule, asked, AT, constant(0xff))).toEqual(new Date(AT.getTime() + 60_000));
    const shorter = { attemptsBefore: 0, gone: false, retryAfterSeconds: 5 };
    expect(nextAttemptAt(schedule, shorter, AT, constant(0))).toEqual(new Date(AT.getTime() + 10_000));
    expect(nextAttemptAt(schedule, { attemptsBefore: 1, gone: false }, AT, constant(0))).toBeUndefined();
    expect(nextAttemptAt(schedule, { attemptsBefore: 0, gone: true }, AT, constant(0))).toBeUndefined();
  });

  it("caps a receiver's Retry-After at a day, or the schedule's longest wait", () => {
    // A receiver asking for centuries kept its deliveries pending (and stored) for good; one asking
    // past the largest date retried at once, as often as the schedule has steps.
    for (const [schedule, cap] of [
      [[10_000, 300_000], 86_400_000],
      [[10_000, 172_800_000], 172_800_000],
    ] as const) {
      for (const retryAfterSeconds of [99_999_999_999, 1e20, Number.MAX_VALUE, 86_400 * 365]) {
        const asked = { attemptsBefore: 0, gone: false, retryAfterSeconds };
        expect(nextAttemptAt(schedule, asked, AT, constant(0)), String(retryAfterSeconds)).toEqual(
          new Date(AT.getTime() + cap),
        );
      }
    }
  });

  it("reads 32 bits of the source as a number in [0, 1)", () => {
    expect(unitInterval(constant(0))).toBe(0);
    expect(unitInterval(constant(0xff))).toBe((2 ** 32 - 1) / 2 ** 32);
    const offset = () => new Uint8Array([9, 0, 0, 0, 1]).subarray(1);
    expect(unitInterval(offset)).toBe(1 / 2 ** 32);
  });
});

describe("the worker's retries", () => {
  const cleanup: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step();
  });

  it("draw their jitter from the service's injected randomness", async () => {
    const random = constant(0xff);
    const svc = await startService({
      env: { ...FAST_EVENTS, WEBHOOK_RETRY_SCHEDULE: "20s" },
      random,
      shutdownGraceMs: 500,
    });
    cleanup.push(() => svc.close());
    const r: Receiver = await startReceiver();
    cleanup.push(() => r.close());
    r.answer = () => 500;
    const endpoint = await createEndpoint(svc, svc.issuerKey, r.url);
    await registerCard(svc, svc.issuerKey, "4000000000000010");
    const failed = async () => {
      const page = await svc.store.deliveries.listForEndpoint(endpoint.endpointId, 10);
      return page.deliveries.find((d) => d.attempts === 1);
    };
    await until(async () => (await failed()) !== undefined, 10_000, "the first failed attempt");
    const delivery = await failed();
    const at = delivery?.log[0]?.at.getTime() ?? Number.NaN;
    expect(delivery?.status).toBe("pending");
    // 20 s plus the largest jitter the all-ones source gives: a tenth less one millisecond.
    expect(delivery?.nextAttemptAt?.getTime()).toBe(at + 20_000 + 1_999);
    expect(random.asked).toBe(4);
  });
});
