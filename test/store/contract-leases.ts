import { describe, expect, it } from "vitest";
import type { Store } from "../../src/store/types.js";
import { at } from "./fixtures.js";

/** The rules of `LeaseStore` (src/store/lease-types.ts). */
export function leasesContract(store: () => Store): void {
  describe("leases", () => {
    it("gives one holder at a time, renews with the same token, and a larger token on takeover", async () => {
      const leases = store().leases;
      const a = await leases.acquire("kt-sequencer", "A", at(0), 10_000);
      expect(a?.holder).toBe("A");
      expect(await leases.acquire("kt-sequencer", "B", at(5), 10_000)).toBeUndefined();
      const renewed = await leases.acquire("kt-sequencer", "A", at(8), 10_000);
      expect(renewed).toEqual({ ...a, expiresAt: at(18) });
      expect(await leases.acquire("kt-sequencer", "B", at(17), 10_000)).toBeUndefined();
      const b = await leases.acquire("kt-sequencer", "B", at(18), 10_000);
      expect(b?.holder).toBe("B");
      expect(b?.token).toBeGreaterThan(a?.token ?? Number.POSITIVE_INFINITY);
      // The old holder, back from a pause, cannot renew what another took.
      expect(await leases.acquire("kt-sequencer", "A", at(19), 10_000)).toBeUndefined();
      // Another lease is independent.
      expect((await leases.acquire("other", "A", at(19), 10_000))?.holder).toBe("A");
    });

    it("lets another take over at once after a release, with a larger token still", async () => {
      const leases = store().leases;
      const a = await leases.acquire("kt-sequencer", "A", at(0), 60_000);
      if (a === undefined) throw new Error("no lease");
      await leases.release({ ...a, token: a.token + 100 });
      expect(await leases.acquire("kt-sequencer", "B", at(1), 60_000)).toBeUndefined();
      await leases.release(a);
      const b = await leases.acquire("kt-sequencer", "B", at(1), 60_000);
      expect(b?.token).toBeGreaterThan(a.token);
    });

    it("gives the lease to exactly one of many concurrent takers", async () => {
      const taken = await Promise.all(
        Array.from({ length: 8 }, (_, i) => store().leases.acquire("kt-sequencer", `H${i}`, at(0), 60_000)),
      );
      expect(taken.filter((l) => l !== undefined)).toHaveLength(1);
    });
  });
}
