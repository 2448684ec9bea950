import { generateKeyPairSync, randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type OperatorContext, setBins } from "../../src/domain/admin.js";
import { createApiKey } from "../../src/domain/api-keys.js";
import { deleteUser } from "../../src/domain/erasure.js";
import { grantAccess } from "../../src/domain/grants.js";
import { register } from "../../src/domain/onboarding.js";
import { encryptReceipt, listReceipts } from "../../src/domain/receipts.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import {
  type DomainFixture,
  domainFixture,
  principal,
  receiptMessage,
  rejection,
} from "../support/domain.js";
import { hashPan } from "../support/harness.js";
import { dumpableMongo } from "../support/store-dump.js";

/**
 * What the superseded tenant keeps (SECURITY.md, "The BIN's owner takes its cards back"): its user,
 * keys, grants and the receipts already sealed to it, which it can still list and erase; nothing new
 * reaches it, and the BIN's owner never sees them. On both stores: the MongoDB adapter reads a user's
 * receipts by card, and the superseded user no longer holds the card.
 */

const caller = { requestId: "req-test", sourceIp: "198.51.100.1" };
const PAN = "4111118888888888";

function device() {
  const publicKey = generateKeyPairSync("ec", { namedCurve: "P-256" })
    .publicKey.export({ format: "der", type: "spki" })
    .toString("base64");
  return { keyId: randomUUID(), publicKey };
}

describe.each([
  ["memory store", async () => createMemoryStore()],
  ["MongoDB adapter (fake driver)", async () => (await dumpableMongo()).store],
])("a superseded user keeps what it had: %s", (_name, makeStore) => {
  let f: DomainFixture;
  const squatter = principal("issuer", "bank-b");
  const owner = principal("issuer", "bank-a");
  const merchant = principal("merchant", "shop-1");
  beforeAll(async () => {
    const store = await makeStore();
    await store.init();
    f = await domainFixture({ store });
    await createApiKey(
      f.store,
      "dev",
      { role: "issuer", tier: "standard", tenantId: "bank-a" },
      f.clock.now(),
    );
    const ctx: OperatorContext = {
      store: f.store,
      env: "dev",
      now: f.clock.now(),
      requestId: "op",
      sourceIp: "",
    };
    await setBins(ctx, "bank-a", { bins: ["411111"] });
  });
  afterAll(async () => {
    await f.close();
    await f.store.close();
  });

  it("lists, grants and erases its old receipts; the owner gets the new ones only", async () => {
    const squatKey = device();
    const squat = await register(f.deps, squatter, { hashedPan: hashPan(PAN), ...squatKey });
    const before = await encryptReceipt(
      f.deps,
      merchant,
      receiptMessage(PAN, { merchantId: "m-1" }),
      null,
      caller,
    );
    expect(before.userId).toBe(squat.userId);

    const taken = await register(f.deps, owner, { hashedPan: hashPan(PAN), ...device(), cardBin: "411111" });
    expect(taken.superseded).toBe(true);
    const after = await encryptReceipt(
      f.deps,
      merchant,
      receiptMessage(PAN, { merchantId: "m-1" }),
      null,
      caller,
    );
    expect(after.userId).toBe(taken.userId);

    const page = { pageSize: 10, pageToken: "" };
    const kept = await listReceipts(f.deps, squatter, { userId: squat.userId, ...page });
    expect(kept.receipts.map((r) => r.receiptId)).toEqual([before.receiptId]);
    const owners = await listReceipts(f.deps, owner, { userId: taken.userId, ...page });
    expect(owners.receipts.map((r) => r.receiptId)).toEqual([after.receiptId]);
    expect((await rejection(listReceipts(f.deps, owner, { userId: squat.userId, ...page }))).code).toBe(
      "not_found",
    );
    await grantAccess(f.deps, squatter, { userId: squat.userId, keyId: squatKey.keyId }, caller);

    const erased = await deleteUser(f.deps, squatter, { userId: squat.userId }, caller);
    expect(erased).toMatchObject({ deletedReceipts: 1, deletedKeys: 1 });
    expect((await listReceipts(f.deps, owner, { userId: taken.userId, ...page })).receipts).toHaveLength(1);
    expect(
      (await f.store.users.findByPanHash((await f.store.users.findById(taken.userId))?.panHash ?? ""))
        ?.userId,
    ).toBe(taken.userId);
  });
});
