import { describe, expect, it, vi } from "vitest";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { ESCROW_PAGE_MAX, type ReceiptRecord, type Store } from "../../src/store/types.js";
import { runStoreContract } from "./contract.js";
import { allEscrowed, at, escrowedReceipt, escrowQuery, grant, hex64, owner, receipt } from "./fixtures.js";

runStoreContract("memory", async () => createMemoryStore());

describe("memory store: reading a user's receipts", () => {
  // A page or a lookup by receipt id must not sort or copy everything the user has: at 50,000 receipts
  // that cost the event loop 21-27 ms per page and 79 ms per lookup. Every record the store returns is
  // a new copy with a new Date, so the Dates made count the receipts it copied; and no array longer
  // than a page may be sorted.
  it("touches about a page of receipts per page, not all of them", async () => {
    const store = createMemoryStore();
    await store.init();
    const count = 5_000;
    for (let i = 0; i < count; i++) {
      // Three receipts per second, so equal times are ordered by id too.
      await store.receipts.insert(receipt("usr_1", { createdAt: at(Math.floor(i / 3)) }));
    }
    const RealDate = globalThis.Date;
    let datesMade = 0;
    globalThis.Date = class extends RealDate {
      constructor(...args: ConstructorParameters<typeof Date>) {
        super(...args);
        datesMade++;
      }
      static override [Symbol.hasInstance](value: unknown) {
        return value instanceof RealDate;
      }
    } as unknown as DateConstructor;
    // (`instanceof Date` still holds for the Dates made before the swap.)
    const sort = vi.spyOn(Array.prototype, "sort");
    try {
      const first = await store.receipts.listByUser(owner("usr_1"), 20);
      const second = await store.receipts.listByUser(owner("usr_1"), 20, first.nextCursor);
      const found = await store.receipts.findByReceiptId(second.receipts[0]?.receiptId ?? "", owner("usr_1"));
      expect(first.receipts).toHaveLength(20);
      expect(second.receipts).toHaveLength(20);
      expect(found).toEqual([second.receipts[0]]);
      // Copies of 41 receipts and a decoded cursor.
      expect(datesMade).toBeGreaterThanOrEqual(41);
      expect(datesMade).toBeLessThan(100);
      const sorted = sort.mock.contexts.map((array) => (array as unknown[]).length);
      expect(Math.max(0, ...sorted)).toBeLessThanOrEqual(21);
    } finally {
      globalThis.Date = RealDate;
      sort.mockRestore();
      await store.close();
    }
  });
});

describe("memory store: many receipts escrowed for one card", () => {
  // A card nobody has registered yet can collect any number of receipts, all under one index key. An
  // insert must not scan the ones before it (a list of ids searched on every insert made 20,000 escrow
  // encrypts quadratic: the bench's escrow phase fell from about 7,000 to 2,800 requests a second).
  it("stores each without scanning the card's earlier receipts, and releases them all", async () => {
    const store = createMemoryStore();
    await store.init();
    const panHash = hex64();
    let longestScanned = 0;
    const spies = (["includes", "indexOf", "filter", "find", "some"] as const).map((name) =>
      vi.spyOn(Array.prototype, name),
    );
    try {
      for (let i = 0; i < 5_000; i++) {
        const escrowed = escrowedReceipt(panHash, at(86_400), { createdAt: at(i % 60) });
        expect(await store.receipts.insert(escrowed)).toBe(true);
      }
      for (const spy of spies) {
        for (const array of spy.mock.contexts) {
          longestScanned = Math.max(longestScanned, (array as unknown[]).length);
        }
      }
    } finally {
      for (const spy of spies) spy.mockRestore();
    }
    try {
      expect(longestScanned).toBeLessThan(100);
      // At most ESCROW_PAGE_MAX a page: a caller pages through a card's escrow.
      const pending: ReceiptRecord[] = [];
      let cursor: string | undefined;
      do {
        const page = await store.receipts.findEscrowed(escrowQuery(panHash), at(0), 5_000, cursor);
        expect(page.receipts.length).toBeLessThanOrEqual(ESCROW_PAGE_MAX);
        pending.push(...page.receipts);
        cursor = page.nextCursor;
      } while (cursor !== undefined);
      expect(pending).toHaveLength(5_000);
      expect(new Set(pending.map((r) => r.id)).size).toBe(5_000);
      const to = {
        userId: "usr_1",
        issuerTenantId: "tnt_issuer",
        keyBundle: { keyId: "k-1", algorithm: "RSA-OAEP-256" as const, encryptedAesKey: "a2V5" },
      };
      for (const receipt of pending) expect(await store.receipts.release(receipt, to)).toBe(true);
      expect(await allEscrowed(store, panHash, at(0))).toEqual([]);
      expect((await store.receipts.listByUser(owner("usr_1"), 5_001)).receipts).toHaveLength(5_000);
    } finally {
      await store.close();
    }
  });
});

describe("memory store: expired escrow", () => {
  // The service deletes unreleased escrow after its retention (a TTL index in MongoDB); the memory store
  // deletes it when it next stores a receipt, at most once a minute of store time.
  it("is deleted, freeing its ids, once a receipt is stored after it expired", async () => {
    const store = createMemoryStore();
    await store.init();
    try {
      const panHash = hex64();
      const expiring = escrowedReceipt(panHash, at(100), { createdAt: at(0), paymentId: "pay_e" });
      const lasting = escrowedReceipt(panHash, at(1_000), { createdAt: at(1) });
      for (const r of [expiring, lasting]) expect(await store.receipts.insert(r)).toBe(true);
      await store.receipts.insert(receipt("usr_1", { createdAt: at(50) }));
      // Not yet expired at 50: still there.
      expect(await allEscrowed(store, panHash, at(0))).toEqual([expiring, lasting]);

      await store.receipts.insert(receipt("usr_1", { createdAt: at(120) }));
      // Gone, not merely filtered: asked as of time 0, only the unexpired one is left.
      expect(await allEscrowed(store, panHash, at(0))).toEqual([lasting]);
      expect(
        await store.receipts.findByTransaction(expiring.merchantTenantId, expiring.transactionId),
      ).toEqual([]);
      expect(await store.receipts.findByPaymentId("pay_e", owner("usr_1", panHash))).toBeUndefined();
      const again = receipt("usr_1", { merchantId: expiring.merchantId, receiptId: expiring.receiptId });
      expect(await store.receipts.insert(again)).toBe(true);
    } finally {
      await store.close();
    }
  });
});

describe("memory store: expired grants", () => {
  // As MongoDB's TTL index: an expired grant stays readable (its reader refuses it as expired) until a
  // sweep at least a minute after it expired; then it is gone, and no longer counted against its user.
  it("are kept a minute past expiry, then deleted at the next grant", async () => {
    const store = createMemoryStore();
    try {
      const first = grant("usr_1", at(0));
      await store.grants.create(first, 5, at(0));
      await store.grants.create(grant("usr_1", at(181)), 5, at(181));
      expect(await store.grants.findByHash(first.tokenHash)).toEqual(first);
      await store.grants.create(grant("usr_2", at(241)), 5, at(241));
      expect(await store.grants.findByHash(first.tokenHash)).toBeUndefined();
      expect(await store.grants.deleteByUser("usr_1")).toBe(1);
    } finally {
      await store.close();
    }
  });
});

describe("memory store: expired escrow copies", () => {
  // As MongoDB's TTL index on escrowCopies: an issuer release's escrow copy is deleted (not merely
  // filtered) once its escrow would have expired, and its released receipt stays.
  it("are deleted at the first store step a minute after expiry, the receipt kept", async () => {
    const store = createMemoryStore();
    try {
      const panHash = hex64();
      const held = escrowedReceipt(panHash, at(100), { escrowKeyId: "iek_a", escrowOwnerTenantId: "tnt_a" });
      await store.receipts.insert(held);
      const to = { userId: "usr_1", issuerTenantId: "tnt_a", keyBundle: { ...held.keyBundle, keyId: "k-1" } };
      expect(await store.receipts.release(held, to, "iek_a", [], true)).toBe(true);
      expect(await store.receipts.escrowCopyOf(held, at(0))).toBeDefined();
      await store.receipts.insert(receipt("usr_2", { createdAt: at(200) }));
      // Asked as of time 0 (before its expiry): gone.
      expect(await store.receipts.escrowCopyOf(held, at(0))).toBeUndefined();
      const page = await store.receipts.findEscrowCopies({ panHash, ownerTenantId: "tnt_a" }, at(0), 10);
      expect(page.released).toEqual([]);
      expect(await store.receipts.findByMerchantReceipt(held.merchantId, held.receiptId)).toMatchObject({
        userId: "usr_1",
        keyBundle: to.keyBundle,
      });
    } finally {
      await store.close();
    }
  });
});

describe("memory store: expired escrow copies swept by their readers", () => {
  // Each reader of copies sweeps the expired ones first, as the TTL index would have deleted them by
  // then: asked afterwards as of a time before the expiry, the copy is gone, the receipt kept.
  const readers = {
    escrowCopyOf: (store: Store, r: ReceiptRecord, now: Date) => store.receipts.escrowCopyOf(r, now),
    findEscrowCopies: (store: Store, r: ReceiptRecord, now: Date) =>
      store.receipts.findEscrowCopies({ panHash: r.panHash, ownerTenantId: "tnt_a" }, now, 10),
    releaseAgain: (store: Store, r: ReceiptRecord, now: Date) =>
      store.receipts.releaseAgain(r, { userId: "usr_x", keyBundle: r.keyBundle }, "tnt_a", now),
  };
  for (const [name, readAt] of Object.entries(readers)) {
    it(`${name} a minute after expiry deletes the copy, the receipt kept`, async () => {
      const store = createMemoryStore();
      try {
        const panHash = hex64();
        const held = escrowedReceipt(panHash, at(100), {
          createdAt: at(0),
          escrowKeyId: "iek_a",
          escrowOwnerTenantId: "tnt_a",
        });
        const lasting = escrowedReceipt(panHash, at(1_000), {
          createdAt: at(1),
          escrowKeyId: "iek_a",
          escrowOwnerTenantId: "tnt_a",
        });
        for (const r of [held, lasting]) expect(await store.receipts.insert(r)).toBe(true);
        const to = {
          userId: "usr_1",
          issuerTenantId: "tnt_a",
          keyBundle: { ...held.keyBundle, keyId: "k-1" },
        };
        for (const r of [held, lasting])
          expect(await store.receipts.release(r, to, "iek_a", [], true)).toBe(true);
        // Within the minute after the last sweep: nothing is deleted, the copy is there as of time 0.
        await readAt(store, held, at(50));
        expect(await store.receipts.escrowCopyOf(held, at(0))).toBeDefined();
        await readAt(store, held, at(200));
        // Asked as of time 0 (before its expiry): gone from every reader; the unexpired one stays.
        expect(await store.receipts.escrowCopyOf(held, at(0))).toBeUndefined();
        const page = await store.receipts.findEscrowCopies({ panHash, ownerTenantId: "tnt_a" }, at(0), 10);
        expect(page.released.map((x) => x.receipt.id)).toEqual([lasting.id]);
        const again = { userId: "usr_1", keyBundle: { ...held.keyBundle, keyId: "k-2" } };
        expect(await store.receipts.releaseAgain(held, again, "tnt_a", at(0))).toBe(false);
        expect(await store.receipts.findByMerchantReceipt(held.merchantId, held.receiptId)).toMatchObject({
          userId: "usr_1",
          keyBundle: to.keyBundle,
        });
      } finally {
        await store.close();
      }
    });
  }
});
