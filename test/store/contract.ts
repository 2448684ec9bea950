import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { AuditEvent, AuditQuery, Store } from "../../src/store/types.js";
import { cardAliasesContract } from "./contract-card-aliases.js";
import { eraseRevocationsContract, type StoreFaults } from "./contract-erase-revocations.js";
import { erasureContract } from "./contract-erasure.js";
import { escrowContract } from "./contract-escrow.js";
import { escrowCopiesContract } from "./contract-escrow-copies.js";
import { eventsContract } from "./contract-events.js";
import { ktIssuersContract } from "./contract-kt-issuers.js";
import { ktLogContract } from "./contract-kt-log.js";
import { leasesContract } from "./contract-leases.js";
import { merchantKeysContract } from "./contract-merchant-keys.js";
import { ownershipContract } from "./contract-ownership.js";
import { paymentsContract } from "./contract-payments.js";
import { receiptsContract } from "./contract-receipts.js";
import { transferContract } from "./contract-transfer.js";
import { usersContract } from "./contract-users.js";
import { apiKey, at, auditEvent, grant, uid } from "./fixtures.js";

/**
 * The store contract suite: every rule of `src/store/types.ts`, run against one implementation.
 * `makeStore` must return a fresh, empty, initialised store; each test gets its own and closes it.
 * `faultsOf`, for a store that can fail inside a step (the MongoDB fake driver), injects such failures.
 */
export function runStoreContract(
  name: string,
  makeStore: () => Promise<Store>,
  faultsOf?: (store: Store) => StoreFaults,
): void {
  describe(`store contract: ${name}`, { timeout: 30_000 }, () => {
    let current: Store | undefined;
    const store = (): Store => {
      if (current === undefined) throw new Error("no store: beforeEach did not run");
      return current;
    };
    beforeEach(async () => {
      current = await makeStore();
    });
    afterEach(async () => {
      await current?.close();
      current = undefined;
    });

    it("answers ping, and init can run again on an initialised store", async () => {
      await expect(store().ping()).resolves.toBeUndefined();
      await expect(store().init()).resolves.toBeUndefined();
    });

    apiKeysContract(store);
    rateLimitsContract(store);
    auditContract(store);
    idempotencyContract(store);
    grantsContract(store);
    usersContract(store);
    cardAliasesContract(store);
    transferContract(store);
    receiptsContract(store);
    paymentsContract(store);
    merchantKeysContract(store);
    ownershipContract(store);
    escrowContract(store);
    escrowCopiesContract(store);
    erasureContract(store);
    eraseRevocationsContract(store, faultsOf === undefined ? undefined : () => faultsOf(store()));
    eventsContract(store);
    ktLogContract(store);
    ktIssuersContract(store);
    leasesContract(store);
  });
}

function apiKeysContract(store: () => Store): void {
  describe("apiKeys", () => {
    it("finds an inserted key by its hash, and nothing for an unknown hash", async () => {
      const record = apiKey();
      expect(await store().apiKeys.insert(record)).toBe(true);
      expect(await store().apiKeys.findByHash(record.keyHash)).toEqual(record);
      expect(await store().apiKeys.findByHash("0".repeat(64))).toBeUndefined();
    });

    it("refuses a second key with the same id or the same hash", async () => {
      const first = apiKey();
      await store().apiKeys.insert(first);
      expect(await store().apiKeys.insert(apiKey({ id: first.id }))).toBe(false);
      expect(await store().apiKeys.insert(apiKey({ keyHash: first.keyHash }))).toBe(false);
      expect(await store().apiKeys.list()).toEqual([first]);
    });

    it("lists every key, oldest first", async () => {
      const newest = apiKey({ createdAt: at(20) });
      const oldest = apiKey({ createdAt: at(0) });
      const middle = apiKey({ createdAt: at(10), role: "issuer", merchantIds: [] });
      for (const record of [newest, oldest, middle]) await store().apiKeys.insert(record);
      expect(await store().apiKeys.list()).toEqual([oldest, middle, newest]);
    });

    it("revokes a key once: a second revoke keeps the first time; an unknown id is false", async () => {
      const record = apiKey();
      await store().apiKeys.insert(record);
      expect(await store().apiKeys.revoke(record.id, at(60))).toBe(true);
      expect(await store().apiKeys.revoke(record.id, at(120))).toBe(true);
      expect((await store().apiKeys.findByHash(record.keyHash))?.revokedAt).toEqual(at(60));
      expect(await store().apiKeys.revoke(uid("key"), at(60))).toBe(false);
    });

    it("keeps what was stored when the caller mutates its objects, and leaves the caller's object as it was", async () => {
      const record = apiKey();
      const before = structuredClone(record);
      await store().apiKeys.insert(record);
      expect(record).toEqual(before);
      record.merchantIds.push("m-evil");
      record.name = "changed";
      const found = await store().apiKeys.findByHash(before.keyHash);
      expect(found).toEqual(before);
      found?.merchantIds.push("m-evil");
      expect(await store().apiKeys.findByHash(before.keyHash)).toEqual(before);
    });
  });
}

function rateLimitsContract(store: () => Store): void {
  describe("rateLimits", () => {
    it("counts per key and per window", async () => {
      const limits = store().rateLimits;
      const [w1, w2] = [at(0), at(60)];
      expect(await limits.increment("key_a", w1, at(120))).toBe(1);
      expect(await limits.increment("key_a", w1, at(120))).toBe(2);
      expect(await limits.increment("key_b", w1, at(120))).toBe(1);
      expect(await limits.increment("key_a", w2, at(180))).toBe(1);
      expect(await limits.increment("key_a", w1, at(120))).toBe(3);
    });

    it("gives each of 20 concurrent increments its own count", async () => {
      const counts = await Promise.all(
        Array.from({ length: 20 }, () => store().rateLimits.increment("key_a", at(0), at(120))),
      );
      expect(counts.sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    });
  });
}

function auditContract(store: () => Store): void {
  describe("audit", () => {
    it("lists events newest first, at most `limit`, with every field kept", async () => {
      const first = auditEvent({ at: at(1), action: "grant.created", userId: "usr_1", subject: "ab12cd34" });
      const third = auditEvent({ at: at(3), action: "payment.decrypted", subject: "pay_1", keyId: "k-1" });
      const second = auditEvent({ at: at(2), action: "receipt.decrypted" });
      for (const event of [first, third, second]) await store().audit.append(event);
      expect(await store().audit.list(2)).toEqual([third, second]);
      expect(await store().audit.list(10)).toEqual([third, second, first]);
    });

    /** Reads pages of `limit` from `cursor` until one comes back empty; returns the events and the end. */
    const pollAll = async (limit: number, query: AuditQuery = {}, cursor?: string) => {
      const read: AuditEvent[] = [];
      for (let next = cursor; ; ) {
        const page = await store().audit.page(query, limit, next);
        expect(page.events.length).toBeLessThanOrEqual(limit);
        if (page.events.length === 0) return { read, cursor: page.cursor };
        read.push(...page.events);
        next = page.cursor;
      }
    };

    it("pages in the order written, so that polling with a page of 2 reads 5 events of 5", async () => {
      // Out of time order on purpose: a writer's clock is no order.
      const events = [at(5), at(1), at(4), at(2), at(3)].map((time, i) =>
        auditEvent({ at: time, action: `key.change.${i}`, keyId: `k-${i}`, previousKeyId: `k-${i - 1}` }),
      );
      for (const event of events) await store().audit.append(event);
      // The newest-first listing with a time filter lost events to polling; pages lose none.
      expect((await pollAll(2)).read).toEqual(events);
      expect((await pollAll(1)).read).toEqual(events);
    });

    it("continues from a cursor with what was written after it, and an empty page keeps its place", async () => {
      const first = auditEvent({ action: "grant.created" });
      await store().audit.append(first);
      const caughtUp = await pollAll(10);
      expect(caughtUp.read).toEqual([first]);
      const idle = await store().audit.page({}, 10, caughtUp.cursor);
      expect(idle.events).toEqual([]);
      const later = [auditEvent({ action: "key.rotated" }), auditEvent({ action: "key.registered" })];
      for (const event of later) await store().audit.append(event);
      expect((await pollAll(1, {}, idle.cursor)).read).toEqual(later);
    });

    it("pages one tenant's events only, and starts after a time when asked", async () => {
      const mine = [0, 1, 2, 3].map((i) =>
        auditEvent({ at: at(i * 10), tenantId: "tnt_a", subject: `a${i}` }),
      );
      for (const event of mine) {
        await store().audit.append(event);
        await store().audit.append(auditEvent({ at: event.at, tenantId: "tnt_b" }));
      }
      expect((await pollAll(1, { tenantId: "tnt_a" })).read).toEqual(mine);
      expect((await pollAll(3, { tenantId: "tnt_a", after: at(10) })).read).toEqual(mine.slice(2));
      expect((await pollAll(3, { after: at(30) })).read).toEqual([]);
      expect((await pollAll(3, { tenantId: "tnt_c" })).read).toEqual([]);
    });

    it("reads every one of 60 events appended while a reader polls, each once", async () => {
      const events = Array.from({ length: 60 }, (_, i) => auditEvent({ subject: `e${i}` }));
      const read: AuditEvent[] = [];
      let cursor: string | undefined;
      const poll = async () => {
        const page = await store().audit.page({}, 2, cursor);
        read.push(...page.events);
        cursor = page.cursor;
      };
      const writers = events.map((event) => store().audit.append(event));
      for (let i = 0; i < 30; i++) await poll();
      await Promise.all(writers);
      read.push(...(await pollAll(7, {}, cursor)).read);
      expect(read.map((e) => e.subject).sort()).toEqual(events.map((e) => e.subject).sort());
    });

    it("refuses a page token it did not make", async () => {
      for (const token of ["", "abc", "a-1", `a${"9".repeat(16)}`, "eyJhIjoxfQ"]) {
        await expect(store().audit.page({}, 5, token)).rejects.toMatchObject({
          code: "invalid_request",
          violations: [{ field: "pageToken" }],
        });
      }
    });
  });
}

function idempotencyContract(store: () => Store): void {
  describe("idempotency", () => {
    const expires = at(86_400);
    /** A lease that outlasts every test below except the lease tests. */
    const lease = at(3_600);

    it("starts a key once, reports it in progress, then replays the completed response", async () => {
      const idem = store().idempotency;
      expect(await idem.begin("idem-1", "hash-a", expires, at(0), lease)).toEqual({ kind: "started" });
      expect(await idem.begin("idem-1", "hash-a", expires, at(1), lease)).toEqual({
        kind: "in_progress",
        requestHash: "hash-a",
      });
      await idem.complete("idem-1", '{"paymentId":"pay_1"}');
      const completed = { kind: "completed", requestHash: "hash-a", response: '{"paymentId":"pay_1"}' };
      expect(await idem.begin("idem-1", "hash-a", expires, at(2), lease)).toEqual(completed);
      // A different body with the same key gets the first call's hash, so the caller can refuse it.
      expect(await idem.begin("idem-1", "hash-b", expires, at(3), lease)).toEqual(completed);
      expect(await idem.begin("idem-2", "hash-a", expires, at(3), lease)).toEqual({ kind: "started" });
    });

    it("lets a retry start again after abandon, but never forgets a completed response", async () => {
      const idem = store().idempotency;
      await idem.begin("idem-1", "hash-a", expires, at(0), lease);
      await idem.abandon("idem-1", lease);
      expect(await idem.begin("idem-1", "hash-a", expires, at(1), lease)).toEqual({ kind: "started" });
      await idem.complete("idem-1", "first");
      await idem.abandon("idem-1", lease);
      await idem.complete("idem-1", "second");
      expect(await idem.begin("idem-1", "hash-a", expires, at(2), lease)).toEqual({
        kind: "completed",
        requestHash: "hash-a",
        response: "first",
      });
    });

    it("treats a record expired at `now` as absent", async () => {
      const idem = store().idempotency;
      await idem.begin("idem-1", "hash-a", at(10), at(0), lease);
      await idem.complete("idem-1", "old");
      expect(await idem.begin("idem-1", "hash-b", at(100), at(10), lease)).toEqual({ kind: "started" });
      expect(await idem.begin("idem-1", "hash-c", at(200), at(20), lease)).toEqual({
        kind: "in_progress",
        requestHash: "hash-b",
      });
    });

    it("starts exactly one of 20 concurrent calls with the same key", async () => {
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          store().idempotency.begin("idem-1", `hash-${i}`, expires, at(0), lease),
        ),
      );
      expect(results.filter((r) => r.kind === "started")).toHaveLength(1);
      expect(results.filter((r) => r.kind === "in_progress")).toHaveLength(19);
    });

    it("lets a retry of the same request take over a started key once its lease has run out", async () => {
      const idem = store().idempotency;
      // A call started at 0 and died with its process: it never completes nor abandons its key.
      expect(await idem.begin("idem-1", "hash-a", expires, at(0), at(60))).toEqual({ kind: "started" });
      expect(await idem.begin("idem-1", "hash-a", expires, at(59), at(119))).toEqual({
        kind: "in_progress",
        requestHash: "hash-a",
      });
      expect(await idem.begin("idem-1", "hash-a", expires, at(60), at(120))).toEqual({ kind: "started" });
      // The takeover holds a new lease: the key is in progress again until it runs out.
      expect(await idem.begin("idem-1", "hash-a", expires, at(61), at(121))).toEqual({
        kind: "in_progress",
        requestHash: "hash-a",
      });
      await idem.complete("idem-1", "done");
      expect(await idem.begin("idem-1", "hash-a", expires, at(500), at(560))).toEqual({
        kind: "completed",
        requestHash: "hash-a",
        response: "done",
      });
    });

    it("keeps a key taken over: the call whose lease ran out cannot abandon it any more", async () => {
      const idem = store().idempotency;
      await idem.begin("idem-1", "hash-a", expires, at(0), at(60));
      // The first call outlived its lease; a retry took the key over.
      expect(await idem.begin("idem-1", "hash-a", expires, at(60), at(120))).toEqual({ kind: "started" });
      await idem.abandon("idem-1", at(60));
      expect(await idem.begin("idem-1", "hash-a", expires, at(61), at(121))).toEqual({
        kind: "in_progress",
        requestHash: "hash-a",
      });
      // Its holder can.
      await idem.abandon("idem-1", at(120));
      expect(await idem.begin("idem-1", "hash-a", expires, at(62), at(122))).toEqual({ kind: "started" });
    });

    it("never lets another request take over a stale key, and lets one of many retries take it", async () => {
      const idem = store().idempotency;
      await idem.begin("idem-1", "hash-a", expires, at(0), at(60));
      expect(await idem.begin("idem-1", "hash-b", expires, at(90), at(150))).toEqual({
        kind: "in_progress",
        requestHash: "hash-a",
      });
      const retries = await Promise.all(
        Array.from({ length: 10 }, () => idem.begin("idem-1", "hash-a", expires, at(90), at(150))),
      );
      expect(retries.filter((r) => r.kind === "started")).toHaveLength(1);
      expect(retries.filter((r) => r.kind === "in_progress")).toHaveLength(9);
    });
  });
}

function grantsContract(store: () => Store): void {
  describe("grants", () => {
    const cap = 5;

    it("stores a grant and finds it by token hash", async () => {
      const record = grant("usr_1", at(0));
      expect(await store().grants.create(record, cap, at(0))).toEqual({ kind: "created" });
      expect(await store().grants.findByHash(record.tokenHash)).toEqual(record);
      expect(await store().grants.findByHash("0".repeat(64))).toBeUndefined();
    });

    it("refuses a grant over the cap with the oldest expiry, and frees slots as grants expire", async () => {
      const grants = store().grants;
      for (let i = 0; i < cap; i++) {
        expect(await grants.create(grant("usr_1", at(i * 10)), cap, at(i * 10))).toEqual({ kind: "created" });
      }
      const refused = grant("usr_1", at(45));
      expect(await grants.create(refused, cap, at(45))).toEqual({
        kind: "cap_reached",
        oldestExpiresAt: at(180),
      });
      expect(await grants.findByHash(refused.tokenHash)).toBeUndefined();
      // Another user is not affected by usr_1's cap.
      expect(await grants.create(grant("usr_2", at(45)), cap, at(45))).toEqual({ kind: "created" });
      // At 181 s the first grant has expired: one slot is free, and then the next oldest is reported.
      expect(await grants.create(grant("usr_1", at(181)), cap, at(181))).toEqual({ kind: "created" });
      expect(await grants.create(grant("usr_1", at(182)), cap, at(182))).toEqual({
        kind: "cap_reached",
        oldestExpiresAt: at(190),
      });
    });

    it("still finds a grant just expired, also after its user took another (the reader checks expiry)", async () => {
      const first = grant("usr_1", at(0));
      await store().grants.create(first, cap, at(0));
      expect(await store().grants.create(grant("usr_1", at(181)), cap, at(181))).toEqual({ kind: "created" });
      expect(await store().grants.findByHash(first.tokenHash)).toEqual(first);
    });

    it("creates exactly `cap` of 20 concurrent grants for one user", async () => {
      const results = await Promise.all(
        Array.from({ length: 20 }, () => store().grants.create(grant("usr_1", at(0)), cap, at(0))),
      );
      expect(results.filter((r) => r.kind === "created")).toHaveLength(cap);
      expect(results.filter((r) => r.kind === "cap_reached")).toHaveLength(20 - cap);
      expect(await store().grants.create(grant("usr_1", at(180)), cap, at(180))).toEqual({ kind: "created" });
    });
  });
}
