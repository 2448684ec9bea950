import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KeysService, LookupKeyResponseSchema } from "../../gen/receipts/v1/keys_pb.js";
import { EncryptedReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import {
  createKeyTrust,
  createReceiptsClient,
  KeyVerificationError,
  type MerchantReceipt,
  sealAndStoreReceipt,
} from "../../src/client/index.js";
import { base64 } from "../../src/kt/bytes.js";
import { CARD_BIN, Directory, HASHED_PAN, NOW } from "./kt-fixture.js";

/**
 * sealAndStoreReceipt against a service over a real socket that records every request: a key the
 * merchant's trust policy does not verify is never sealed to, and nothing follows the look-up.
 * (The lies that need the key-transparency members of the look-up answer are in key-trust.test.ts
 * until the service's answer carries them.)
 */

describe("sealAndStoreReceipt with a trust policy", () => {
  const directory = new Directory();
  const seen: string[] = [];
  let server: Server;
  let url = "";
  beforeAll(async () => {
    const handler = connectNodeAdapter({
      routes: (router) => {
        router.service(KeysService, {
          // Today's answer: a key and nothing that vouches for it (what a substituted key looks like).
          lookupKey: () =>
            create(LookupKeyResponseSchema, {
              keyId: directory.device.keyId,
              algorithm: "HPKE-P256-SHA256-A256GCM",
              publicKey: base64(directory.device.spki),
              isEscrowed: false,
              aadBound: true,
            }),
        });
        router.service(ReceiptsService, {
          storeSealedReceipt: () => ({ receipt: create(EncryptedReceiptSchema, {}) }),
        });
      },
    });
    server = createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      handler(req, res);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const receipt: MerchantReceipt = {
    receiptId: "r-trust-1",
    merchantId: "m-trust",
    merchantName: "Careful Coffee",
    transactionId: "t-trust-1",
    transactionDate: "2026-11-25T11:00:00Z",
    currency: "EUR",
    recipientHashedPan: HASHED_PAN,
    cardBin: CARD_BIN,
  };

  it("refuses a key nothing vouches for and sends nothing after the look-up", async () => {
    seen.length = 0;
    const merchant = createReceiptsClient({ baseUrl: url, apiKey: "rk_test_merchant" });
    const trust = createKeyTrust({ policy: directory.world.policyJson, baseUrl: url, now: () => NOW });
    const refused = await sealAndStoreReceipt(merchant, receipt, { trust }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(KeyVerificationError);
    expect(seen).toEqual(["POST /receipts.v1.KeysService/LookupKey"]);
  });

  it("needs a trust, and the card's own BIN with a KeyTrust, before any request", async () => {
    seen.length = 0;
    const merchant = createReceiptsClient({ baseUrl: url, apiKey: "rk_test_merchant" });
    const trust = createKeyTrust({ policy: directory.world.policyJson, baseUrl: url, now: () => NOW });
    await expect(sealAndStoreReceipt(merchant, receipt, {} as never)).rejects.toThrow(/needs options.trust/);
    const { cardBin: _bin, ...noBin } = receipt;
    await expect(sealAndStoreReceipt(merchant, noBin, { trust })).rejects.toThrow(/card's own BIN/);
    expect(seen).toEqual([]);
  });

  it('seals to the service\'s word only when told "unverified"', async () => {
    seen.length = 0;
    const merchant = createReceiptsClient({ baseUrl: url, apiKey: "rk_test_merchant" });
    const stored = await sealAndStoreReceipt(merchant, receipt, { trust: "unverified" });
    expect(stored.kind).toBe("receipt");
    expect(seen).toEqual([
      "POST /receipts.v1.KeysService/LookupKey",
      "POST /receipts.v1.ReceiptsService/StoreSealedReceipt",
    ]);
  });
});
