import { describe, expect, it, onTestFinished } from "vitest";
import { generateIssuerSigner, signStatement, statementOf } from "../../src/client/key-binding.js";
import { type OperatorContext, setBins } from "../../src/domain/admin.js";
import { createApiKey } from "../../src/domain/api-keys.js";
import { confirmRoot } from "../../src/domain/kt/issuer-admin.js";
import { registerIssuerSigningKey } from "../../src/domain/kt/issuer-keys.js";
import { formatTime } from "../../src/kt/statements.js";
import { createMongoStore } from "../../src/store/mongo/index.js";
import type { Store } from "../../src/store/types.js";
import { FakeMongo } from "../store/fake-mongo/index.js";
import { domainFixture } from "../support/domain.js";

/**
 * A BIN moving at once, with its old owner's release (docs/key-transparency.md), is one store step:
 * the old owner's list without the prefix, its release, the new owner's list with it. A failure of
 * the driver in the middle of that step (injected on the fake MongoDB driver, at the insert of the
 * new owner's prefixes) leaves the prefix with its old owner, never with nobody, and a retry moves it.
 * Written in two steps, as it was, the release was committed before the failure and the card BIN
 * routed to no issuer.
 */

const BANK_A = "bank-a";
const BANK_B = "bank-b";

async function world(fake: FakeMongo) {
  const store = await createMongoStore({
    uri: "mongodb://fake.invalid/",
    dbName: "receipts_move",
    createClient: fake.createClient,
  });
  await store.init();
  const f = await domainFixture({ store });
  const now = f.clock.now();
  const a = await createApiKey(store, "dev", { role: "issuer", tier: "standard", tenantId: BANK_A }, now);
  await createApiKey(store, "dev", { role: "issuer", tier: "standard", tenantId: BANK_B }, now);
  const ctx: OperatorContext = { store, env: "dev", now, requestId: "op", sourceIp: "" };
  const root = await generateIssuerSigner("Ed25519");
  await registerIssuerSigningKey(f.deps, a.record, { publicKey: root.spki, statement: "", signature: "" });
  // Bank A's BINs before its root counts: the operator's word.
  await setBins(ctx, BANK_A, { bins: ["411111"] });
  await confirmRoot(ctx, BANK_A, root.signingKeyId);
  const release = await signStatement(
    statementOf({
      v: 1,
      type: "receipts.v1/bin-release",
      issuer: BANK_A,
      prefix: "411111",
      kind: "bin",
      to: BANK_B,
      version: 1,
      issuedAt: formatTime(now.getTime()),
    }),
    root,
  );
  return { f, store, ctx, release: { statement: release.statement, signature: release.signature } };
}

async function owners(store: Store) {
  return {
    a: await store.bins.list(BANK_A),
    b: await store.bins.list(BANK_B),
    card: await store.bins.ownerOf("41111122"),
  };
}

describe("an immediate BIN move is one store step", () => {
  it("leaves the prefix with its old owner when the driver fails mid-move, and moves it on retry", async () => {
    const fake = new FakeMongo();
    const { f, store, ctx, release } = await world(fake);
    onTestFinished(() => f.close());
    expect(await owners(store)).toEqual({ a: ["411111"], b: [], card: BANK_A });

    let armed = true;
    fake.onOperation = (name) => {
      if (armed && name === "insertOne bins") {
        armed = false;
        throw new Error("injected: the connection dropped");
      }
    };
    await expect(setBins(ctx, BANK_B, { bins: ["411111"], releases: [release] })).rejects.toThrow(/injected/);
    expect(armed).toBe(false);
    // Nothing of the move was written: the old owner keeps the prefix, and its release was not taken
    // (the same release moves it on the retry).
    expect(await owners(store)).toEqual({ a: ["411111"], b: [], card: BANK_A });

    fake.onOperation = undefined;
    const done = await setBins(ctx, BANK_B, { bins: ["411111"], releases: [release] });
    expect(done.bins).toEqual(["411111"]);
    expect(await owners(store)).toEqual({ a: [], b: ["411111"], card: BANK_B });
  });
});
