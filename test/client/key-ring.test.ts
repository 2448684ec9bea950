import { generateKeyPairSync } from "node:crypto";
import { describe, expect, it } from "vitest";
import { openListing } from "../../src/client/key-ring.js";
import { importRsaKey, sealReceipt, type WebCryptoKey } from "../../src/client/webcrypto.js";

function rsaPair(): { publicKey: string; privateKey: string } {
  const pair = generateKeyPairSync("rsa", { modulusLength: 2048 });
  return {
    publicKey: pair.publicKey.export({ type: "spki", format: "der" }).toString("base64"),
    privateKey: pair.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64"),
  };
}

const receipt = (receiptId: string) => ({
  receiptId,
  merchantId: "m-42",
  merchantName: "Corner Coffee",
  transactionId: `t-${receiptId}`,
  transactionDate: "2026-11-21T09:30:00Z",
  currency: "EUR",
});

describe("openListing", () => {
  it("opens each receipt of a listing with the key its bundle names, across a rotation", async () => {
    const before = rsaPair();
    const after = rsaPair();
    const lost = rsaPair();
    // Newest first, as the service lists them: two after the rotation, one before, one to a lost key.
    const listing = [
      await sealReceipt(receipt("r-4"), after.publicKey, { keyId: "key-2" }),
      await sealReceipt(receipt("r-3"), lost.publicKey, { keyId: "key-lost" }),
      await sealReceipt(receipt("r-2"), after.publicKey, { keyId: "key-2" }),
      await sealReceipt(receipt("r-1"), before.publicKey, { keyId: "key-1" }),
    ];
    // A CryptoKey (non-extractable, as a device keeps it) and a base64 key in one ring.
    const ring = new Map<string, string | WebCryptoKey>([
      ["key-1", before.privateKey],
      ["key-2", await importRsaKey(after.privateKey, "private")],
    ]);
    const opened = await openListing(listing, ring);
    expect(
      opened.map((entry) => [entry.receiptId, entry.keyId, entry.ok ? entry.receipt.merchantName : null]),
    ).toEqual([
      ["r-4", "key-2", "Corner Coffee"],
      ["r-3", "key-lost", null],
      ["r-2", "key-2", "Corner Coffee"],
      ["r-1", "key-1", "Corner Coffee"],
    ]);
    const lostEntry = opened[1];
    expect(lostEntry?.ok === false && lostEntry.error.code).toBe("unknown_key");
    expect(lostEntry?.ok === false && lostEntry.error.message).toContain("no private key for keyId key-lost");
  });

  it("takes a plain object as the ring and reports a receipt the named key cannot open", async () => {
    const right = rsaPair();
    const wrong = rsaPair();
    const sealed = await sealReceipt(receipt("r-1"), right.publicKey, { keyId: "key-1" });
    const [entry] = await openListing([sealed], { "key-1": wrong.privateKey });
    expect(entry?.ok === false && entry.error.code).toBe("integrity_failure");
    const [good] = await openListing([sealed], { "key-1": right.privateKey, toString: "x" });
    expect(good?.ok === true && good.receipt.receiptId).toBe("r-1");
    const [proto] = await openListing(
      [{ ...sealed, keyBundle: { ...sealed.keyBundle, keyId: "toString" } }],
      {},
    );
    expect(proto?.ok === false && proto.error.code).toBe("unknown_key");
  });
});
