import { beforeAll, describe, expect, it } from "vitest";
import { openListing } from "../../src/client/key-ring.js";
import {
  EnvelopeError,
  openReceipt,
  type ReceiptEnvelope,
  type ReceiptJson,
  sealReceipt,
} from "../../src/client/webcrypto.js";
import { receiptAad, sealReceipt as sealBytes } from "../../src/crypto/envelope.js";
import { generateRsaKeyPair, parsePublicKey, type RsaKeyPair } from "../../src/crypto/keys.js";
import { rejectionOf } from "./support.js";

/**
 * A merchant seals on its side whatever it likes to a card's public key, and the service cannot look
 * inside: the AAD proves which receipt an envelope is, not that it holds one. The device's opener
 * checks the plaintext's shape before an app reads it, and the merchant's sealer checks it before
 * sealing, so a receipt whose `items` is a string never reaches `items.reduce` on the phone. And a
 * listing comes from the service, whose operator may answer anything: each entry opens or fails as
 * that entry's `EnvelopeError`, never a TypeError that loses the whole listing.
 */

const identity = { version: "1.0", receiptId: "r-1", merchantId: "m-1", transactionId: "t-1" };
const receipt = {
  ...identity,
  merchantName: "Shop",
  transactionDate: "2026-11-27T10:00:00Z",
  currency: "EUR",
  totalAmount: 950,
  items: [{ lineItemId: "1", name: "Tea", quantity: 1, unitPrice: 950, totalPrice: 950 }],
};

let pair: RsaKeyPair;
beforeAll(async () => {
  pair = await generateRsaKeyPair();
});

/** An envelope holding `plaintext` exactly, sealed as a merchant of its own making could. */
function envelopeOf(plaintext: unknown) {
  const bytes = Buffer.from(JSON.stringify(plaintext), "utf8");
  const sealed = sealBytes(bytes, receiptAad(identity), parsePublicKey(pair.publicKey).key);
  return {
    ...identity,
    keyBundle: {
      keyId: "k-1",
      algorithm: "RSA-OAEP-256",
      encryptedAesKey: sealed.encryptedAesKey.toString("base64"),
    },
    ciphertext: sealed.ciphertext.toString("base64"),
    iv: sealed.iv.toString("base64"),
    authTag: sealed.authTag.toString("base64"),
  };
}

/** Each member an app reads, given a value of the wrong JSON type, and the problem named for it. */
const HOSTILE: [string, Record<string, unknown>, string][] = [
  ["items as a string", { items: "abc" }, "items: must be an array"],
  ["a null item", { items: [null] }, "items[0]: must be a JSON object"],
  ["an item that is a number", { items: [5] }, "items[0]: must be a JSON object"],
  ["an item's taxes as a string", { items: [{ name: "x", taxes: "x" }] }, "items[0].taxes: must be an array"],
  ["an item's quantity as a string", { items: [{ quantity: "2" }] }, "items[0].quantity: must be an integer"],
  ["money as a string", { totalAmount: "1e999" }, "totalAmount: must be an integer"],
  ["money with a fraction", { totalAmount: 9.5 }, "totalAmount: must be an integer"],
  ["money past 2^53", { totalAmount: 2 ** 60 }, "totalAmount: must be an integer"],
  ["money as null", { subtotal: null }, "subtotal: must be an integer"],
  ["a currency that is a number", { currency: 978 }, "currency: must be a string"],
  ["a name that is an object", { merchantName: { toString: 1 } }, "merchantName: must be a string"],
  ["a date that is not one", { transactionDate: "yesterday" }, "transactionDate: must be an RFC 3339"],
  ["a date as a number", { transactionDate: 1764237600 }, "transactionDate: must be an RFC 3339"],
  ["tenders as a string", { tenders: "cash" }, "tenders: must be an array"],
  ["a null tender", { tenders: [null] }, "tenders[0]: must be a JSON object"],
  ["a tax rate as a string", { taxBreakdown: [{ rate: "19%" }] }, "taxBreakdown[0].rate: must be a number"],
  ["card digits as a number", { cardLast4: 4242 }, "cardLast4: must be a string"],
];

describe("openReceipt refuses a plaintext that is not a receipt", () => {
  it.each(HOSTILE)("%s", async (_name, patch, problem) => {
    const err = await rejectionOf(openReceipt(envelopeOf({ ...receipt, ...patch }), pair.privateKey));
    expect(err).toBeInstanceOf(EnvelopeError);
    expect(err).toMatchObject({ code: "integrity_failure" });
    expect((err as Error).message).toContain(problem);
  });

  it("names every problem, up to ten", async () => {
    const patch = Object.fromEntries(
      ["merchantName", "currency", "merchantCity", "merchantStreet"].map((f) => [f, 1]),
    );
    const many = { ...patch, items: Array.from({ length: 20 }, () => null) };
    const err = await rejectionOf(openReceipt(envelopeOf({ ...receipt, ...many }), pair.privateKey));
    const named = (err as Error).message.split(": must be").length - 1;
    expect(named).toBe(10);
    expect((err as Error).message).toContain("merchantName: must be a string");
  });

  it("opens a receipt of a newer version, its members this client does not know kept as they are", async () => {
    const newer = {
      ...receipt,
      loyaltyPoints: { earned: 12 },
      items: [{ ...receipt.items[0], colour: "red" }],
    };
    const opened = await openReceipt(envelopeOf(newer), pair.privateKey);
    expect(opened).toEqual(newer);
  });

  it("takes no member from the prototype: a __proto__ member is the receipt's own, not a field", async () => {
    const text = `${JSON.stringify(receipt).slice(0, -1)},"__proto__":{"items":"abc"}}`;
    const opened = await openReceipt(envelopeOf(JSON.parse(text)), pair.privateKey);
    expect(opened.items).toEqual(receipt.items);
    expect(({} as Record<string, unknown>).items).toBeUndefined();
  });
});

describe("sealReceipt refuses a receipt the device would refuse to open", () => {
  it.each(HOSTILE)("%s", async (_name, patch, problem) => {
    const err = await rejectionOf(
      sealReceipt({ ...receipt, ...patch } as unknown as ReceiptJson, pair.publicKey),
    );
    expect(err).toMatchObject({ code: "invalid_receipt" });
    expect((err as Error).message).toContain(problem);
  });

  it("seals and opens a well-formed receipt, members this client does not know included", async () => {
    const newer = { ...receipt, loyaltyPoints: 12 } as unknown as ReceiptJson;
    expect(await openReceipt(await sealReceipt(newer, pair.publicKey), pair.privateKey)).toEqual(newer);
  });
});

describe("openListing takes each hostile entry of a listing as that entry's failure", () => {
  type Good = ReturnType<typeof envelopeOf> & { keyId: string; storedAt: string };
  const good = (): Good => ({ ...envelopeOf(receipt), keyId: "k-1", storedAt: "2026-11-27T10:00:00Z" });
  const ENTRIES: [string, (good: Good) => unknown, string][] = [
    ["null", () => null, "names no keyId"],
    ["a number", () => 5, "names no keyId"],
    ["a key bundle of null", (good) => ({ ...good, keyBundle: null }), "keyBundle must be an object"],
    ["a key bundle that is text", (good) => ({ ...good, keyBundle: "k-1" }), "keyBundle must be an object"],
    [
      "a key id that is a number",
      (good) => ({ ...good, keyBundle: { ...good.keyBundle, keyId: 7 } }),
      "names no keyId",
    ],
    [
      "a ciphertext that is a number",
      (good) => ({ ...good, ciphertext: 5 }),
      "ciphertext must be base64 text or bytes",
    ],
    ["an IV that is a number of bytes", (good) => ({ ...good, iv: 12 }), "iv must be base64 text or bytes"],
    ["an IV that is an object", (good) => ({ ...good, iv: {} }), "iv must be base64 text or bytes"],
    [
      "a receipt id that is a number",
      (good) => ({ ...good, receiptId: 5 }),
      "must be strings without line breaks",
    ],
  ];

  it.each(ENTRIES)("%s", async (_name, entryOf, reason) => {
    const listing = [entryOf(good()), good()] as ReceiptEnvelope[];
    const opened = await openListing(listing, new Map([["k-1", pair.privateKey]]));
    expect(opened[0]).toMatchObject({ ok: false, error: { code: "invalid_envelope" } });
    expect(opened[0]?.ok === false && opened[0].error.message).toContain(reason);
    expect(opened[0]).toMatchObject({ receiptId: expect.any(String), keyId: expect.any(String) });
    expect(opened[1]).toMatchObject({ ok: true, receipt: receipt });
  });
});
