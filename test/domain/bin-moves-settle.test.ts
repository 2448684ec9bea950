import { describe, expect, it } from "vitest";
import { BIN_MOVE_DELAY_MS, settleBinMoves } from "../../src/domain/kt/bin-moves.js";
import type { KtIssuerRecord } from "../../src/store/kt-issuers.js";
import { createMongoStore } from "../../src/store/mongo/index.js";
import { INDEXES } from "../../src/store/mongo/indexes.js";
import { FakeMongo } from "../store/fake-mongo/index.js";

/**
 * The key log's sequencer settles due BIN moves at the start of every round (`kt/bin-moves.ts`). It
 * must not read every issuer record to find them (on MongoDB a collection scan per round, every 2 s
 * or faster): it asks for the records holding a move requested a full delay ago, a filter an index
 * of `ktIssuers` leads with, and reads the newest snapshot only when there is one.
 */

const NOW = new Date("2026-06-01T00:00:00Z");

function issuer(tenantId: string, requestedAt?: Date): KtIssuerRecord {
  return {
    tenantId,
    signingKeys: [],
    requireBindings: false,
    revision: 1,
    updatedAt: NOW,
    ...(requestedAt === undefined
      ? {}
      : { binMoves: [{ prefix: "411111", kind: "bin", from: "bank-a", requestedAt }] }),
  };
}

describe("settling due BIN moves", () => {
  it("asks MongoDB for the tenants with a move old enough by an indexed filter, never for every tenant", async () => {
    const fake = new FakeMongo();
    const store = await createMongoStore({
      uri: "mongodb://fake.invalid/",
      dbName: "receipts_settle",
      createClient: fake.createClient,
    });
    await store.init();
    for (let i = 0; i < 20; i++) await store.ktIssuers.put(issuer(`bank-${i}`));
    await store.ktIssuers.put(issuer("bank-young", new Date(NOW.getTime() - 86_400_000)));
    const from = fake.filters.length;

    expect(await settleBinMoves(store, NOW)).toBe(0);
    const sent = fake.filters.slice(from).filter((f) => f.collection === "ktIssuers");
    expect(sent.length).toBeGreaterThan(0);
    const led = (INDEXES.ktIssuers ?? []).map((index) => Object.keys(index.key as object)[0]);
    for (const { filter } of sent) {
      const [field] = Object.keys(filter);
      expect(field, JSON.stringify(filter)).toBeDefined();
      expect(led, JSON.stringify(filter)).toContain(field);
      expect(filter).toEqual({
        "binMoves.requestedAt": { $lte: new Date(NOW.getTime() - BIN_MOVE_DELAY_MS) },
      });
    }
    // Nothing was due, so the snapshot was not read either.
    expect(fake.filters.slice(from).filter((f) => f.collection.startsWith("ktDirector"))).toEqual([]);
    await store.close();
  });
});
