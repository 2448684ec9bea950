import { afterEach, describe, expect, it } from "vitest";
import { grantAccess } from "../../src/domain/grants.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { createPayment, decryptPayment } from "../../src/domain/payments.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { createMongoStore } from "../../src/store/mongo/index.js";
import type { Store } from "../../src/store/types.js";
import { FakeMongo } from "../store/fake-mongo/index.js";
import {
  type DomainFixture,
  domainFixture,
  principal,
  receiptMessage,
  rejection,
} from "../support/domain.js";
import { hashPan } from "../support/harness.js";

const caller = { requestId: "req-1", sourceIp: "203.0.113.7" };
const issuer = principal("issuer", "bank-a");
const merchant = principal("merchant", "shop-1");

/**
 * An expired grant answers the same whatever the store: `forbidden` ("expired") while the store still
 * holds it, as a TTL index deletes late. The embedded store used to drop it as soon as its user asked
 * for another grant, turning the same expired token into `not_found` there only.
 */
describe("an expired grant, on both stores", () => {
  let f: DomainFixture | undefined;
  afterEach(async () => {
    await f?.close();
    await f?.store.close();
  });

  const stores: Array<[string, () => Promise<Store>]> = [
    ["memory", async () => createMemoryStore()],
    [
      "mongodb (fake driver)",
      async () => {
        const store = await createMongoStore({
          uri: "mongodb://fake.invalid/",
          dbName: "receipts",
          createClient: new FakeMongo().createClient,
        });
        await store.init();
        return store;
      },
    ],
  ];

  for (const [name, makeStore] of stores) {
    it(`is refused as expired after its user took a new grant: ${name}`, async () => {
      f = await domainFixture({ store: await makeStore() });
      const keys = await generateKeys(f.deps, issuer);
      const { userId } = await register(f.deps, issuer, {
        hashedPan: hashPan("5100"),
        publicKey: keys.publicKey,
        keyId: keys.keyId,
      });
      const payment = await createPayment(f.deps, merchant, {
        gateway: "gateway_a",
        receipt: receiptMessage("5100", { amount: 300n }),
      });
      const first = await grantAccess(f.deps, issuer, { userId, keyId: keys.keyId }, caller);
      f.clock.advance(181_000);
      await grantAccess(f.deps, issuer, { userId, keyId: keys.keyId }, caller);
      const input = {
        paymentId: payment.payment.paymentId,
        tokenId: first.tokenId,
        accessTokenId: "",
        privateKey: keys.privateKey,
      };
      const err = await rejection(decryptPayment(f.deps, issuer, input, caller));
      expect([err.code, err.message]).toEqual([
        "forbidden",
        "The access token has expired; ask for a new grant.",
      ]);
    });
  }
});
