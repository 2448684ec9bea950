import { beforeAll, describe, expect, it } from "vitest";
import { openListing } from "../../src/client/key-ring.js";
import { checkReceiptSignature, type SigningKeyInfo } from "../../src/client/signatures.js";
import {
  type ReceiptJson,
  type SealedEnvelope,
  sealReceipt,
  type WebCryptoKey,
  type WebCryptoKeyPair,
} from "../../src/client/webcrypto.js";
import { toBase64 } from "../../src/kt/base64.js";
import { signingTextOf } from "../../src/receipt-fields.js";

/**
 * The cardholder's check of a merchant signature (README, "Merchant signatures"; issue 31 item 9), with
 * WebCrypto only, from the side of someone who forges, replays or strips signatures: a receipt is `valid`
 * only when a key the merchant lists, unrevoked when the receipt was stored, signed exactly this content;
 * an unsigned one is `invalid` when the merchant declared every receipt of that time signed.
 */

const subtle = globalThis.crypto.subtle;
const T = (minute: number) => new Date(Date.UTC(2026, 10, 25, 10, minute)).toISOString();
const receipt: ReceiptJson = {
  version: "1.0",
  receiptId: "r-1",
  merchantId: "m-1",
  merchantName: "Corner Coffee",
  transactionId: "t-1",
  transactionDate: "2026-11-25T09:30:00Z",
  currency: "EUR",
  totalAmount: 700,
  items: [{ lineItemId: "1", name: "Flat white", quantity: 2, unitPrice: 350, totalPrice: 700 }],
};

interface Signer {
  privateKey: WebCryptoKey;
  publicKey: string;
}

async function signer(): Promise<Signer> {
  const pair = (await subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as WebCryptoKeyPair;
  return {
    privateKey: pair.privateKey,
    publicKey: toBase64(new Uint8Array(await subtle.exportKey("spki", pair.publicKey))),
  };
}

/** `receipt` signed by `key` as a merchant's terminal signs it (signature and key id inside). */
async function signed(fields: ReceiptJson, key: Signer, merchantKeyId: string): Promise<ReceiptJson> {
  const text = new TextEncoder().encode(signingTextOf(fields as never));
  const signature = new Uint8Array(await subtle.sign("Ed25519", key.privateKey, text));
  return { ...fields, merchantSignature: toBase64(signature), merchantKeyId } as ReceiptJson;
}

let first: Signer;
let second: Signer;
let stranger: Signer;
beforeAll(async () => {
  [first, second, stranger] = await Promise.all([signer(), signer(), signer()]);
});

/** The merchantId's listing: mk_1 from minute 0 to 30, then mk_2 (current). */
function listing(overrides: { first?: Partial<SigningKeyInfo>; second?: Partial<SigningKeyInfo> } = {}) {
  return [
    { merchantKeyId: "mk_2", publicKey: second.publicKey, registeredAt: T(30), ...overrides.second },
    {
      merchantKeyId: "mk_1",
      publicKey: first.publicKey,
      registeredAt: T(0),
      replacedAt: T(30),
      ...overrides.first,
    },
  ];
}

describe("checkReceiptSignature", () => {
  it("is valid for a listed key over exactly this content, the current key or a replaced one", async () => {
    expect(
      await checkReceiptSignature(await signed(receipt, second, "mk_2"), listing(), T(40)),
    ).toMatchObject({
      status: "valid",
      merchantKeyId: "mk_2",
    });
    expect((await checkReceiptSignature(await signed(receipt, first, "mk_1"), listing(), T(10))).status).toBe(
      "valid",
    );
  });

  it("is invalid for changed content, another key's signature, an unlisted key, a mangled signature", async () => {
    const good = await signed(receipt, second, "mk_2");
    const cases: Array<[string, object]> = [
      ["a changed total", { ...good, totalAmount: 1 }],
      ["a changed item", { ...good, items: [{ ...receipt.items?.[0], totalPrice: 1 }] }],
      [
        "a signature by mk_1 named as mk_2",
        { ...(await signed(receipt, first, "mk_1")), merchantKeyId: "mk_2" },
      ],
      ["a stranger's key named as mk_2", await signed(receipt, stranger, "mk_2")],
      ["a key the merchant does not list", await signed(receipt, stranger, "mk_forged")],
      ["a signature without a key id", { ...good, merchantKeyId: "" }],
      ["a key id without a signature", { ...receipt, merchantKeyId: "mk_2" }],
      ["a short signature", { ...good, merchantSignature: toBase64(new Uint8Array(63)) }],
      ["a signature that is not base64", { ...good, merchantSignature: "!!!" }],
    ];
    for (const [label, forged] of cases) {
      expect((await checkReceiptSignature(forged, listing(), T(40))).status, label).toBe("invalid");
    }
  });

  it("refuses a key revoked before the receipt was stored, and keeps what it signed before", async () => {
    const byFirst = await signed(receipt, first, "mk_1");
    const revoked = listing({ first: { revokedAt: T(20) } });
    expect((await checkReceiptSignature(byFirst, revoked, T(10))).status).toBe("valid");
    expect((await checkReceiptSignature(byFirst, revoked, T(20))).status).toBe("invalid");
    expect((await checkReceiptSignature(byFirst, revoked, T(50))).status).toBe("invalid");
    // Without the time it was stored, a revoked key is never good enough.
    expect((await checkReceiptSignature(byFirst, revoked)).status).toBe("invalid");
    expect(
      (await checkReceiptSignature(byFirst, listing({ first: { revokedAt: "garbage" } }), T(10))).status,
    ).toBe("invalid");
  });

  it("reports an unsigned receipt absent, or invalid when the key current then declared every receipt signed", async () => {
    const declared = listing({ second: { allReceiptsSigned: true } });
    expect((await checkReceiptSignature(receipt, listing(), T(40))).status).toBe("absent");
    expect((await checkReceiptSignature(receipt, [], T(40))).status).toBe("absent");
    expect((await checkReceiptSignature(receipt, declared, T(40))).status).toBe("invalid");
    // Stored while mk_1 was current, which declared nothing: unsigned then was allowed.
    expect((await checkReceiptSignature(receipt, declared, T(10))).status).toBe("absent");
    // No time: the current key's declaration decides.
    expect((await checkReceiptSignature(receipt, declared)).status).toBe("invalid");
    // Stripping the signature from a signed receipt does not make it pass either.
    const stripped = { ...(await signed(receipt, second, "mk_2")), merchantSignature: "", merchantKeyId: "" };
    expect((await checkReceiptSignature(stripped, declared, T(40))).status).toBe("invalid");
  });
});

describe("openListing with signing keys", () => {
  async function deviceKey() {
    const pair = (await subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, true, [
      "deriveBits",
    ])) as WebCryptoKeyPair;
    return { pair, spki: toBase64(new Uint8Array(await subtle.exportKey("spki", pair.publicKey))) };
  }

  it("reports each opened receipt's signature, reading each merchantId's keys once", async () => {
    const device = await deviceKey();
    const seal = async (fields: ReceiptJson, createdAt: string) => ({
      ...(await sealReceipt(fields, device.spki, { keyId: "k-1" })),
      createdAt,
    });
    const envelopes: Array<SealedEnvelope & { createdAt: string }> = [
      await seal(await signed(receipt, second, "mk_2"), T(40)),
      await seal(
        { ...(await signed({ ...receipt, receiptId: "r-2" }, second, "mk_2")), totalAmount: 5 },
        T(41),
      ),
      await seal({ ...receipt, receiptId: "r-3" }, T(42)),
      await seal({ ...receipt, receiptId: "r-4", merchantId: "m-2" }, T(43)),
    ];
    const asked: string[] = [];
    const opened = await openListing(
      envelopes,
      { "k-1": device.pair.privateKey },
      {
        signingKeys: async (merchantId) => {
          asked.push(merchantId);
          if (merchantId === "m-2") throw new Error("offline");
          return listing({ second: { allReceiptsSigned: true } });
        },
      },
    );
    expect(opened.map((o) => (o.ok ? o.signature?.status : o.error.code))).toEqual([
      "valid",
      "invalid",
      "invalid",
      "invalid",
    ]);
    expect(opened[3]?.ok && opened[3].signature?.reason).toContain("offline");
    expect(asked.sort()).toEqual(["m-1", "m-2"]);
  });

  it("adds no signature check when no keys are given, as before", async () => {
    const device = await deviceKey();
    const envelope = await sealReceipt(receipt, device.spki, { keyId: "k-1" });
    const [opened] = await openListing([envelope], { "k-1": device.pair.privateKey });
    expect(opened?.ok).toBe(true);
    expect(opened?.ok && "signature" in opened).toBe(false);
  });
});
