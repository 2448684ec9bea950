import { type IndexDescription, MongoClient } from "mongodb";
import { afterEach, describe, expect, it } from "vitest";
import { AppError } from "../../src/errors.js";
import { createLogger } from "../../src/logging.js";
import { createStore } from "../../src/store/index.js";
import { createMongoStore, DEFAULT_INDEX_TIMEOUT_MS } from "../../src/store/mongo/index.js";
import { INDEXES } from "../../src/store/mongo/indexes.js";
import type { IssuerEscrowKeyRecord, Store } from "../../src/store/types.js";
import { FakeMongo, keyOf, type RecordedFilter, type RecordedQuery } from "./fake-mongo/index.js";
import {
  at,
  auditEvent,
  cardOf,
  escrowedReceipt,
  escrowQuery,
  grant,
  hex64,
  owner,
  pendingKey,
  receipt,
} from "./fixtures.js";

/**
 * What the MongoDB adapter sends, beyond the store contract: the options it pins, its time limits,
 * its indexes against its own queries, and its errors under contention. On the driver-level fake.
 */
describe("MongoDB adapter", () => {
  const stores: Store[] = [];
  const storeOn = async (fake: FakeMongo, options: { operationTimeoutMs?: number } = {}) => {
    const store = await createMongoStore({
      uri: "mongodb://fake.invalid/",
      dbName: "receipts",
      createClient: fake.createClient,
      ...options,
    });
    stores.push(store);
    return store;
  };
  afterEach(async () => {
    for (const store of stores.splice(0)) await store.close();
  });

  it("reads from the primary with majority read and write concern, whatever the URI says", async () => {
    const clients: MongoClient[] = [];
    const store = await createMongoStore({
      uri: "mongodb://127.0.0.1:1/?readPreference=secondaryPreferred&readConcernLevel=local&w=1",
      dbName: "receipts",
      createClient: (uri, options) => {
        const client = new MongoClient(uri, options);
        clients.push(client);
        return client;
      },
    });
    stores.push(store);
    const [client] = clients;
    expect(client?.readPreference.mode).toBe("primary");
    expect(client?.readConcern?.level).toBe("majority");
    expect(client?.writeConcern?.w).toBe("majority");
  });

  it("gives index creation its own generous time limit, not the per-call one", async () => {
    const fake = new FakeMongo();
    // A build on a big collection: far longer than two per-call limits.
    fake.slow("createIndexes receipts", 400);
    const store = await storeOn(fake, { operationTimeoutMs: 50 });
    await expect(store.init()).resolves.toBeUndefined();
    const builds = fake.operations.filter((op) => op.name.startsWith("createIndexes"));
    expect(builds).toHaveLength(Object.keys(INDEXES).length);
    for (const build of builds) {
      expect(build.options?.maxTimeMS).toBe(DEFAULT_INDEX_TIMEOUT_MS);
      // The socket must wait for the server's answer as long as the build may take.
      expect(build.client?.socketTimeoutMS).toBeGreaterThan(DEFAULT_INDEX_TIMEOUT_MS);
    }
    // Requests keep their own short limit.
    await store.audit.list(1);
    expect(fake.operations.at(-1)?.options?.maxTimeMS).toBe(50);
  });

  it("answers a slow call itself within STORE_TIMEOUT_MS: the service's outer limit never fires first", async () => {
    for (const storeTimeoutMs of [400, 5_000]) {
      const fake = new FakeMongo();
      const config = {
        store: "mongodb",
        mongodbUri: "mongodb://fake.invalid/",
        mongodbDb: "receipts",
        storeTimeoutMs,
        receiptRetentionDays: undefined,
      } as const;
      const store = await createStore(config, createLogger("silent"), { createClient: fake.createClient });
      stores.push(store);
      await store.audit.list(1);
      const maxTimeMS = fake.operations.at(-1)?.options?.maxTimeMS ?? Number.POSITIVE_INFINITY;
      // Two operations (a call's most before its own deadline) fit in the limit.
      expect(2 * maxTimeMS).toBeLessThan(storeTimeoutMs);
      if (storeTimeoutMs > 1_000) continue;
      // Unwrapped (as withTimeLimit's own test shows what the outer limit does): the adapter's own
      // deadline answers a call that hangs, and it is inside the limit.
      fake.slow("find audit", 3 * storeTimeoutMs);
      const failure = await store.audit.list(1).catch((err: unknown) => err);
      expect(failure).toBeInstanceOf(AppError);
      expect((failure as AppError).code).toBe("service_unavailable");
      const deadline = /No answer within (\d+) ms/.exec(String((failure as AppError).cause))?.[1];
      expect(Number(deadline)).toBeLessThan(storeTimeoutMs);
    }
  });

  it("starts on a database whose indexes an earlier version created", async () => {
    const fake = new FakeMongo();
    const old = fake.createClient("mongodb://fake.invalid/", {}).db("receipts");
    await old.collection("audit").createIndex({ at: -1 }, { name: "list", maxTimeMS: 1000 });
    await old
      .collection("receipts")
      .createIndex({ panHash: 1, isEscrowed: 1 }, { name: "listEscrowed", maxTimeMS: 1000 });
    const store = await storeOn(fake);
    await expect(store.init()).resolves.toBeUndefined();
  });

  it("has an index for every sorted page it reads: equality fields, then the sort", async () => {
    const fake = new FakeMongo();
    const store = await storeOn(fake);
    await store.init();
    const panHash = hex64();
    for (let i = 0; i < 3; i++) {
      await store.audit.append(auditEvent({ at: at(i) }));
      await store.receipts.insert(receipt("usr_1", { createdAt: at(i) }));
      await store.receipts.insert(escrowedReceipt(panHash, at(999), { createdAt: at(i) }));
    }
    expect(await store.audit.list(2)).toHaveLength(2);
    await store.audit.page({}, 2);
    await store.audit.page({ tenantId: "tnt_issuer" }, 2);
    await store.audit.page({ after: at(0) }, 2);
    const page = await store.receipts.listByUser(owner("usr_1"), 2);
    await store.receipts.listByUser(owner("usr_1"), 2, page.nextCursor);
    const escrowed = await store.receipts.findEscrowed(escrowQuery(panHash), at(0), 2);
    await store.receipts.findEscrowed(escrowQuery(panHash), at(0), 2, escrowed.nextCursor);

    const pages = fake.queries.filter((q) => q.sort !== undefined && q.limit > 0);
    expect(new Set(pages.map((q) => q.collection))).toEqual(new Set(["audit", "receipts"]));
    for (const query of pages) expect(servingIndex(query), JSON.stringify(query)).toBeDefined();
  });

  it("serves every filter it sends to a collection that grows with cardholders or receipts from an index", async () => {
    const fake = new FakeMongo();
    const store = await storeOn(fake);
    await store.init();
    // A cardholder's life: registration, a rotation, receipts delivered and escrowed, release, erasure.
    const userId = "usr_1";
    const [first, second] = [pendingKey(), pendingKey()];
    const card = cardOf(userId);
    for (const [key, now] of [
      [first, at(0)],
      [second, at(60)],
    ] as const) {
      await store.users.register({ panHash: card, tenantId: "tnt_issuer", newUserId: userId, key, now });
    }
    await store.users.listKeys(userId);
    await store.users.findKey(second.keyId);
    const kept = receipt(userId);
    await store.receipts.insert(kept);
    const escrowed = escrowedReceipt(card, at(999), { escrowOwnerTenantId: "tnt_issuer" });
    await store.receipts.insert(escrowed);
    await store.receipts.findByReceiptId(kept.receiptId, owner(userId));
    await store.receipts.findEscrowed(escrowQuery(card), at(0), 10);
    const bundle = {
      keyId: second.keyId,
      algorithm: "RSA-OAEP-256" as const,
      encryptedAesKey: "d3JhcHBlZA==",
    };
    await store.receipts.release(escrowed, { userId, issuerTenantId: "tnt_issuer", keyBundle: bundle });
    await store.receipts.countByUser(owner(userId));
    const token = grant(userId, at(0));
    await store.grants.create(token, 5, at(0));
    await store.grants.findByHash(token.tokenHash);
    await store.users.erase(userId);
    await store.grants.deleteByUser(userId);
    await store.receipts.deleteByUser(owner(userId), 10);
    await store.receipts.countEscrowedFor(card, "tnt_issuer");
    await store.receipts.deleteEscrowedFor(card, "tnt_issuer", 10);

    // Grants: a few minutes' decrypts, but hundreds a second at a peak.
    const growing = new Set(["users", "keys", "receipts", "receiptClaims", "payments", "grants"]);
    const sent = fake.filters.filter((f) => growing.has(f.collection));
    expect(new Set(sent.map((f) => f.collection))).toEqual(
      new Set(["users", "keys", "receipts", "receiptClaims", "grants"]),
    );
    expect(sent.filter((f) => f.collection === "keys" && f.kind === "multiWrite")).toHaveLength(1);
    for (const filter of sent) expect(leadingIndex(filter), JSON.stringify(filter)).toBeDefined();
  });

  it("never lets an audit reader pass an event still on its way: the reader claims the hole", async () => {
    const fake = new FakeMongo();
    const store = await storeOn(fake);
    await store.init();
    const counters = fake.createClient("mongodb://fake.invalid/", {}).db("receipts").collection("counters");
    const audit = fake.createClient("mongodb://fake.invalid/", {}).db("receipts").collection("audit");
    await store.audit.append(auditEvent({ subject: "one" }));
    // A writer takes number 2 and stalls before its insert; number 3 is written first.
    const taken = await counters.findOneAndUpdate(
      { _id: "audit" as never },
      { $inc: { seq: 1 } },
      { returnDocument: "after", maxTimeMS: 1000 },
    );
    expect(taken?.seq).toBe(2);
    await store.audit.append(auditEvent({ subject: "three" }));
    const page = await store.audit.page({}, 10);
    expect(page.events.map((e) => e.subject)).toEqual(["one", "three"]);
    // The reader gave number 2 up: the stalled insert fails, so the event can only come later.
    await expect(
      audit.insertOne({ _id: 2 as never, ...auditEvent({ subject: "two" }) }, { maxTimeMS: 1000 }),
    ).rejects.toMatchObject({ code: 11000 });
    // An append whose number was given up takes the next one, and the reader gets it.
    await audit.insertOne({ _id: 4 as never, hole: true }, { maxTimeMS: 1000 });
    await store.audit.append(auditEvent({ subject: "late" }));
    const next = await store.audit.page({}, 10, page.cursor);
    expect(next.events.map((e) => e.subject)).toEqual(["late"]);
    expect(await audit.countDocuments({ _id: 5 as never }, { maxTimeMS: 1000 })).toBe(1);
  });

  it("lets a reader catch up at once with more events written since the last read than one scan looks at", async () => {
    const fake = new FakeMongo();
    const store = await storeOn(fake);
    await store.init();
    // 12,000 events of other tenants written since any reader last read (straight into the fake's
    // storage: 12,000 inserts through the driver take half a minute), then one of this tenant.
    const written = 12_000;
    const db = fake.database("receipts");
    for (let seq = 1; seq <= written; seq++) {
      const doc = { _id: seq, ...auditEvent({ tenantId: "tnt_other", at: at(seq) }) };
      db.write("audit", undefined, db.locate("audit", doc), doc);
    }
    const counter = { _id: "audit", seq: written };
    db.write("counters", undefined, db.locate("counters", counter), counter);
    await store.audit.append(auditEvent({ tenantId: "tnt_mine", subject: "mine" }));
    const page = await store.audit.page({ tenantId: "tnt_mine" }, 10);
    expect(page.events.map((e) => e.subject)).toEqual(["mine"]);
  });

  it("reads every slow audit append once, while a reader polls between its number and its insert", async () => {
    const fake = new FakeMongo();
    const store = await storeOn(fake);
    await store.init();
    fake.slow("insertOne audit", 40);
    const read: string[] = [];
    let cursor: string | undefined;
    const poll = async () => {
      const page = await store.audit.page({}, 3, cursor);
      read.push(...page.events.map((e) => e.subject ?? ""));
      cursor = page.cursor;
    };
    const writes = Array.from({ length: 12 }, (_, i) => store.audit.append(auditEvent({ subject: `e${i}` })));
    let settled = false;
    const all = Promise.all(writes).then(() => {
      settled = true;
    });
    while (!settled) {
      await poll();
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await all;
    for (let i = 0; i < 5; i++) await poll();
    expect(read.sort()).toEqual(Array.from({ length: 12 }, (_, i) => `e${i}`).sort());
  });

  it("keeps a receipt's claim as long as the receipt: the escrow's expiry until released, none after", async () => {
    const fake = new FakeMongo();
    const store = await storeOn(fake);
    await store.init();
    const escrowed = escrowedReceipt(hex64(), at(999));
    await store.receipts.insert(escrowed);
    const claims = fake.database("receipts").collection("receiptClaims").docs;
    const claimOf = () =>
      [...claims.values()].find(
        (c) => keyOf(c._id) === keyOf({ merchantId: escrowed.merchantId, receiptId: escrowed.receiptId }),
      );
    expect(claimOf()).toEqual({
      _id: { merchantId: escrowed.merchantId, receiptId: escrowed.receiptId },
      panHash: escrowed.panHash,
      id: escrowed.id,
      createdAt: escrowed.createdAt,
      expiresAt: at(999),
    });
    const bundle = { keyId: "k-user", algorithm: "RSA-OAEP-256" as const, encryptedAesKey: "d3JhcHBlZA==" };
    expect(
      await store.receipts.release(escrowed, {
        userId: "usr_1",
        issuerTenantId: "tnt_i",
        keyBundle: bundle,
      }),
    ).toBe(true);
    expect(claimOf()?.expiresAt).toBeUndefined();
    // Both collections expire by the same TTL: claims that still carry an expiry only.
    const ttl = INDEXES.receiptClaims?.find((index) => index.expireAfterSeconds !== undefined);
    expect(ttl).toMatchObject({ key: { expiresAt: 1 }, expireAfterSeconds: 0 });
  });

  it("reports a receipt it could not store as a failure, never as a duplicate", async () => {
    // A merchant told "already exists" would not retry a receipt that was never stored.
    const fake = new FakeMongo();
    const store = await storeOn(fake);
    await store.init();
    expect(await store.receipts.insert(receipt("usr_1"))).toBe(true);
    fake.down();
    const failure = await store.receipts.insert(receipt("usr_1")).catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(AppError);
    expect((failure as AppError).code).toBe("service_unavailable");
  });

  it("reports an issuer escrow key it could not store as a failure, never as an id another tenant holds", async () => {
    // An issuer told "id_taken" would pick another id and sign a new statement for a key never stored.
    const fake = new FakeMongo();
    const store = await storeOn(fake);
    await store.init();
    const key: IssuerEscrowKeyRecord = {
      escrowKeyId: "iek_never_stored",
      tenantId: "tnt_i",
      algorithm: "HPKE-P256-SHA256-A256GCM",
      publicKey: "cHVibGljIGtleQ==",
      createdAt: at(0),
    };
    fake.down();
    const failure = await store.issuerEscrowKeys.insert(key).catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(AppError);
    expect((failure as AppError).code).toBe("service_unavailable");
  });

  it("reports BINs it could not set as a failure, never as a prefix another tenant holds", async () => {
    // An operator told "conflict" would look for another owner of a prefix nobody holds.
    const fake = new FakeMongo();
    const store = await storeOn(fake);
    await store.init();
    expect(await store.bins.set("tnt_i", ["411111"], at(0))).toEqual({ kind: "set" });
    fake.down();
    for (const set of [
      () => store.bins.set("tnt_i", ["422222"], at(1)),
      () => store.bins.setLists([{ tenantId: "tnt_j", kind: "token-bin", bins: ["43333333"] }], at(1)),
    ]) {
      const failure = await set().catch((err: unknown) => err);
      expect(failure).toBeInstanceOf(AppError);
      expect((failure as AppError).code).toBe("service_unavailable");
    }
  });

  it("answers nothing for a pair whose receipt the TTL monitor deleted before its claim", async () => {
    // The TTL monitor deletes expired escrow and expired claims in two collections, in any order.
    const fake = new FakeMongo();
    const store = await storeOn(fake);
    await store.init();
    const escrowed = escrowedReceipt(hex64(), at(999));
    await store.receipts.insert(escrowed);
    const db = fake.createClient("mongodb://fake.invalid/", {}).db("receipts");
    await db
      .collection("receipts")
      .deleteOne({ panHash: escrowed.panHash, id: escrowed.id }, { maxTimeMS: 1000 });
    expect(
      await store.receipts.findByMerchantReceipt(escrowed.merchantId, escrowed.receiptId),
    ).toBeUndefined();
  });

  it("answers service_unavailable, not a bare error, when an idempotency key stays contended", async () => {
    const fake = new FakeMongo();
    const store = await storeOn(fake);
    await store.init();
    const records = fake.database("receipts").collection("idempotency").docs;
    const id = keyOf("idem-1");
    // Another caller claims the key before each insert, and it is gone again before each read.
    fake.onOperation = (name) => {
      if (name === "insertOne idempotency") {
        records.set(id, { _id: "idem-1", requestHash: "h", expiresAt: at(100), leaseUntil: at(50) });
      }
      if (name === "findOne idempotency") records.delete(id);
    };
    const failure = await store.idempotency
      .begin("idem-1", "h", at(100), at(0), at(50))
      .catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(AppError);
    expect((failure as AppError).code).toBe("service_unavailable");
  });
});

/**
 * An index of the adapter whose keys are the query's equality fields (any order), then its sort. A
 * partial index serves only a query that implies its filter; an equality the index's partial filter
 * makes (`isEscrowed: true`) needs no key.
 */
function servingIndex(query: RecordedQuery): string | undefined {
  const sort = Object.entries(query.sort ?? {});
  const reversed = sort.map(([field, direction]) => [field, -direction] as const);
  // Every collection has its `_id` index.
  const indexes: IndexDescription[] = [
    { key: { _id: 1 }, name: "_id_" },
    ...(INDEXES[query.collection] ?? []),
  ];
  return indexes.find((index) => {
    const partial = (index.partialFilterExpression ?? {}) as Record<string, unknown>;
    const equality = Object.entries(query.filter)
      .filter(([field, value]) => !field.startsWith("$") && !isOperators(value))
      .filter(([field, value]) => !(field in partial && keyOf(partial[field]) === keyOf(value)))
      .map(([field]) => field);
    const keys = Object.entries(index.key as Record<string, number>);
    const prefix = keys.slice(0, equality.length).map(([field]) => field);
    const rest = keys.slice(equality.length, equality.length + sort.length);
    const sameSort = (wanted: ReadonlyArray<readonly [string, number]>) =>
      rest.length === wanted.length &&
      rest.every(([f, d], i) => f === wanted[i]?.[0] && d === wanted[i]?.[1]);
    return (
      impliesPartial(query.filter, index) &&
      new Set(prefix).size === equality.length &&
      equality.every((field) => prefix.includes(field)) &&
      (sameSort(sort) || sameSort(reversed))
    );
  })?.name;
}

/**
 * An index of the adapter that a filter can seek by, instead of reading the whole collection: `_id`'s,
 * or one whose first field the filter names by value (or by `$in`), and whose partial filter, if any,
 * the filter implies.
 */
function leadingIndex(sent: RecordedFilter): string | undefined {
  const named = (field: string) => {
    const value = sent.filter[field];
    return value !== undefined && (!isOperators(value) || "$in" in (value as object));
  };
  if (named("_id")) return "_id_";
  return (INDEXES[sent.collection] ?? []).find((index) => {
    const [first] = Object.keys(index.key as Record<string, number>);
    return first !== undefined && named(first) && impliesPartial(sent.filter, index);
  })?.name;
}

/** Whether every query `filter` selects only documents the index's partial filter keeps. */
function impliesPartial(filter: Record<string, unknown>, index: IndexDescription): boolean {
  const partial = (index.partialFilterExpression ?? {}) as Record<string, unknown>;
  return Object.entries(partial).every(([field, condition]) => {
    const value = filter[field];
    if (keyOf(value) === keyOf(condition)) return true;
    // `{$exists: true}` holds for any value the filter asks by equality.
    return keyOf(condition) === keyOf({ $exists: true }) && value !== undefined && !isOperators(value);
  });
}

function isOperators(value: unknown): boolean {
  return (
    typeof value === "object" &&
    value !== null &&
    !(value instanceof Date) &&
    Object.keys(value).every((key) => key.startsWith("$"))
  );
}
