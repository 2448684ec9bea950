import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openListing, openReceiptWithKeyRing } from "../../src/client/key-ring.js";
import {
  EnvelopeError,
  HPKE_KEY_WRAP_ALGORITHM,
  importP256Key,
  openReceipt,
  type ReceiptEnvelope,
  type ReceiptJson,
  sealReceipt,
  type WebCryptoKey,
} from "../../src/client/webcrypto.js";
import { CryptoPool } from "../../src/crypto/crypto-pool.js";
import { decryptBody, receiptAad, receiptAadText, sealedFromText } from "../../src/crypto/envelope.js";
import { generateRsaKeyPair, type RsaKeyPair } from "../../src/crypto/keys.js";
import { HPKE_INFO_TEXT } from "../../src/crypto/suites.js";
import { openBase } from "../crypto/support/rfc9180.js";
import { rejectionOf } from "./support.js";

/**
 * The client opens and seals both suites with WebCrypto only, interoperating
 * with the service's worker pool (node:crypto + @hpke/core) both ways; device keys that cannot be
 * exported work; a key ring opens a rotated user's old and new receipts.
 */

const subtle = globalThis.crypto.subtle;
const ECDH = { name: "ECDH", namedCurve: "P-256" } as const;
const identity = { version: "1.0", receiptId: "rcpt-77", merchantId: "merchant_7", transactionId: "txn-77" };
const receipt: ReceiptJson = {
  ...identity,
  merchantName: "Bäckerei Müller",
  transactionDate: "2026-01-01T10:00:00Z",
  currency: "EUR",
  totalAmount: 833,
  items: [{ lineItemId: "1", name: "Brezel 🥨", quantity: 2, unitPrice: 350, totalPrice: 700 }],
};
const plaintext = JSON.stringify(receipt);

let pool: CryptoPool;
let rsa: RsaKeyPair;
const device = generateKeyPairSync("ec", { namedCurve: "P-256" });
const deviceSpki = device.publicKey.export({ type: "spki", format: "der" }).toString("base64");
const devicePkcs8 = device.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64");

beforeAll(async () => {
  rsa = await generateRsaKeyPair();
  pool = new CryptoPool({
    size: 1,
    keygenSize: 1,
    escrowPrivateKeys: [(await generateRsaKeyPair()).privateKey],
  });
});

afterAll(async () => {
  await pool.close();
});

/** A receipt sealed by the service's worker pool, as the listing's JSON carries it. */
async function sealedByService(spki: string, keyId: string): Promise<ReceiptEnvelope> {
  const text = await pool.seal({ plaintext, aad: receiptAadText(identity), keyId, spki });
  const hpke = text.encapsulatedKey !== undefined;
  return {
    ...identity,
    keyId,
    keyBundle: {
      keyId,
      algorithm: hpke ? HPKE_KEY_WRAP_ALGORITHM : "RSA-OAEP-256",
      encryptedAesKey: text.encryptedAesKey,
      ...(hpke ? { encapsulatedKey: text.encapsulatedKey } : {}),
    },
    ciphertext: text.ciphertext,
    iv: text.iv,
    authTag: text.authTag,
  };
}

/** A P-256 key pair made by WebCrypto whose private key can never be exported, with a public y of `parity`. */
async function deviceKeyPair(parity: 0 | 1) {
  for (;;) {
    const pair = await subtle.generateKey(ECDH, false, ["deriveBits"]);
    const raw = new Uint8Array(await subtle.exportKey("raw", pair.publicKey));
    if (((raw[64] ?? 0) & 1) === parity) return pair;
  }
}

const spkiOfCryptoKey = async (key: WebCryptoKey) =>
  Buffer.from(await subtle.exportKey("spki", key)).toString("base64");

describe("openReceipt (WebCrypto) with P-256 keys opens what the service sealed", () => {
  it("with base64 PKCS#8, PKCS#8 PEM, an imported CryptoKey and a CryptoKeyPair", async () => {
    const envelope = await sealedByService(deviceSpki, "dev-1");
    expect(envelope.keyBundle?.algorithm).toBe(HPKE_KEY_WRAP_ALGORITHM);
    const pem = device.privateKey.export({ type: "pkcs8", format: "pem" }).toString();
    const imported = await importP256Key(devicePkcs8, "private");
    const pair = { privateKey: imported, publicKey: await importP256Key(deviceSpki, "public") };
    for (const key of [devicePkcs8, pem, imported, pair]) {
      expect(await openReceipt(envelope, key)).toEqual(receipt);
    }
  });

  it("with a NON-extractable device key made by crypto.subtle.generateKey, whatever its point's parity", async () => {
    for (const parity of [0, 1] as const) {
      const pair = await deviceKeyPair(parity);
      expect(pair.privateKey.extractable).toBe(false);
      const envelope = await sealedByService(await spkiOfCryptoKey(pair.publicKey), "dev-ne");
      expect(await openReceipt(envelope, pair.privateKey)).toEqual(receipt);
      expect(await openReceipt(envelope, pair)).toEqual(receipt);
    }
  });

  it("refuses another device key, a moved envelope and a tampered encapsulated key as integrity failures", async () => {
    const envelope = await sealedByService(deviceSpki, "dev-1");
    const other = await subtle.generateKey(ECDH, false, ["deriveBits"]);
    const enc = Buffer.from(String(envelope.keyBundle?.encapsulatedKey), "base64");
    enc[20] = (enc[20] ?? 0) ^ 1;
    const failures = await Promise.all([
      rejectionOf(openReceipt(envelope, other.privateKey)),
      rejectionOf(openReceipt({ ...envelope, receiptId: "rcpt-78" }, devicePkcs8)),
      rejectionOf(
        openReceipt(
          {
            ...envelope,
            keyBundle: {
              ...envelope.keyBundle,
              encryptedAesKey: String(envelope.keyBundle?.encryptedAesKey),
              encapsulatedKey: enc.toString("base64"),
            },
          },
          devicePkcs8,
        ),
      ),
    ]);
    for (const error of failures) expect(error).toMatchObject({ code: "integrity_failure" });
  });

  it("says clearly when the key is of the other suite, and refuses malformed HPKE bundles", async () => {
    const hpkeEnvelope = await sealedByService(deviceSpki, "dev-1");
    const rsaEnvelope = await sealedByService(rsa.publicKey, "rsa-1");
    const rsaForHpke = await rejectionOf(openReceipt(hpkeEnvelope, rsa.privateKey));
    const p256ForRsa = await rejectionOf(openReceipt(rsaEnvelope, devicePkcs8));
    const cryptoKeyForRsa = await rejectionOf(
      openReceipt(rsaEnvelope, await importP256Key(devicePkcs8, "private")),
    );
    for (const error of [rsaForHpke, p256ForRsa, cryptoKeyForRsa]) {
      expect(error).toBeInstanceOf(EnvelopeError);
      expect(error).toMatchObject({ code: "invalid_key" });
      expect((error as Error).message).toMatch(/wrapped with (RSA-OAEP-256|HPKE-P256-SHA256-A256GCM)/);
    }
    const bundle = hpkeEnvelope.keyBundle as NonNullable<ReceiptEnvelope["keyBundle"]>;
    const noEnc = await rejectionOf(
      openReceipt({ ...hpkeEnvelope, keyBundle: { ...bundle, encapsulatedKey: "" } }, devicePkcs8),
    );
    const shortEnc = await rejectionOf(
      openReceipt(
        {
          ...hpkeEnvelope,
          keyBundle: { ...bundle, encapsulatedKey: Buffer.alloc(33, 4).toString("base64") },
        },
        devicePkcs8,
      ),
    );
    const longKey = await rejectionOf(
      openReceipt(
        { ...hpkeEnvelope, keyBundle: { ...bundle, encryptedAesKey: Buffer.alloc(256).toString("base64") } },
        devicePkcs8,
      ),
    );
    const unknown = await rejectionOf(
      openReceipt({ ...hpkeEnvelope, keyBundle: { ...bundle, algorithm: "ECIES" } }, devicePkcs8),
    );
    for (const error of [noEnc, shortEnc, longKey, unknown])
      expect(error).toMatchObject({ code: "invalid_envelope" });
    expect((shortEnc as Error).message).toBe("keyBundle.encapsulatedKey must be 65 bytes");
  });

  it("refuses P-256 key text of another curve or a SEC1 PEM as invalid_key", async () => {
    const p384 = generateKeyPairSync("ec", { namedCurve: "P-384" }).privateKey;
    const envelope = await sealedByService(deviceSpki, "dev-1");
    const sec1 = device.privateKey.export({ type: "sec1", format: "pem" }).toString();
    for (const key of [p384.export({ type: "pkcs8", format: "der" }).toString("base64"), sec1]) {
      expect(await rejectionOf(openReceipt(envelope, key))).toMatchObject({ code: "invalid_key" });
    }
  });
});

describe("sealReceipt (WebCrypto) to a P-256 key is opened by the service", () => {
  it("by the worker pool and by the independent RFC 9180 implementation", async () => {
    const envelope = await sealReceipt(receipt, deviceSpki, { keyId: "dev-1" });
    expect(envelope.keyBundle).toMatchObject({ keyId: "dev-1", algorithm: HPKE_KEY_WRAP_ALGORITHM });
    const sealed = sealedFromText({
      encryptedAesKey: envelope.keyBundle.encryptedAesKey,
      encapsulatedKey: envelope.keyBundle.encapsulatedKey ?? "",
      iv: envelope.iv,
      ciphertext: envelope.ciphertext,
      authTag: envelope.authTag,
    });
    expect(sealed.encapsulatedKey).toHaveLength(65);
    expect(sealed.encryptedAesKey).toHaveLength(48);
    const aad = receiptAad(identity);
    const opened = await pool.openReceipt({ privateKey: devicePkcs8, expectedSpki: deviceSpki, sealed, aad });
    expect(JSON.parse(opened.toString("utf8"))).toEqual(receipt);

    const jwk = (device.privateKey as KeyObject).export({ format: "jwk" });
    const aesKey = openBase(
      2,
      Buffer.from(jwk.d ?? "", "base64url"),
      sealed.encapsulatedKey as Buffer,
      Buffer.from(HPKE_INFO_TEXT),
      aad,
      sealed.encryptedAesKey,
    );
    expect(JSON.parse(decryptBody(aesKey, sealed, aad).toString("utf8"))).toEqual(receipt);
  });

  it("to a device's CryptoKey, and round-trips through openReceipt with the non-extractable private key", async () => {
    const pair = await subtle.generateKey(ECDH, false, ["deriveBits"]);
    const envelope = await sealReceipt(receipt, pair.publicKey, { keyId: "dev-2" });
    expect(envelope.keyBundle.algorithm).toBe(HPKE_KEY_WRAP_ALGORITHM);
    expect(await openReceipt(envelope, pair.privateKey)).toEqual(receipt);
  });

  it("and RSA keys still get RSA-OAEP-256, opened by the worker pool", async () => {
    const envelope = await sealReceipt(receipt, rsa.publicKey, { keyId: "rsa-1" });
    expect(envelope.keyBundle.algorithm).toBe("RSA-OAEP-256");
    expect(envelope.keyBundle.encapsulatedKey).toBeUndefined();
    const sealed = sealedFromText({
      ...envelope.keyBundle,
      iv: envelope.iv,
      ciphertext: envelope.ciphertext,
      authTag: envelope.authTag,
    });
    const opened = await pool.openReceipt({
      privateKey: rsa.privateKey,
      expectedSpki: rsa.publicKey,
      sealed,
      aad: receiptAad(identity),
    });
    expect(JSON.parse(opened.toString())).toEqual(receipt);
  });
});

describe("key rings: a user who rotated from RSA to a device P-256 key", () => {
  it("opens old (RSA) and new (HPKE) receipts of one listing, each with the key of its keyId", async () => {
    const devicePair = await subtle.generateKey(ECDH, false, ["deriveBits"]);
    const listing = [
      await sealedByService(await spkiOfCryptoKey(devicePair.publicKey), "key-new"),
      await sealedByService(rsa.publicKey, "key-old"),
    ];
    const rings = [
      new Map<string, string | WebCryptoKey>([
        ["key-old", rsa.privateKey],
        ["key-new", devicePair.privateKey],
      ]),
      { "key-old": rsa.privateKey, "key-new": devicePair },
      async (keyId: string) =>
        keyId === "key-old" ? rsa.privateKey : keyId === "key-new" ? devicePair.privateKey : undefined,
    ];
    for (const ring of rings) {
      for (const envelope of listing) expect(await openReceiptWithKeyRing(envelope, ring)).toEqual(receipt);
      const opened = await openListing(listing, ring);
      expect(opened.map((o) => [o.keyId, o.ok])).toEqual([
        ["key-new", true],
        ["key-old", true],
      ]);
    }
  });

  it("names the keyId a ring has no key for, and opens the rest of the listing", async () => {
    const listing = [
      await sealedByService(rsa.publicKey, "key-old"),
      await sealedByService(deviceSpki, "key-lost"),
    ];
    const ring = { "key-old": rsa.privateKey, toString: devicePkcs8 };
    const error = await rejectionOf(openReceiptWithKeyRing(listing[1] as ReceiptEnvelope, ring));
    expect(error).toMatchObject({ code: "unknown_key" });
    expect((error as Error).message).toBe("no private key for keyId key-lost in the key ring");
    // A key name inherited from Object.prototype is no key.
    const inherited = await rejectionOf(
      openReceiptWithKeyRing(
        {
          ...(listing[1] as ReceiptEnvelope),
          keyBundle: { ...listing[1]?.keyBundle, encryptedAesKey: "", keyId: "constructor" },
        },
        {},
      ),
    );
    expect(inherited).toMatchObject({ code: "unknown_key" });
    const opened = await openListing(listing, ring);
    expect(opened[0]).toMatchObject({ ok: true, receiptId: "rcpt-77", keyId: "key-old" });
    expect(opened[1]).toMatchObject({ ok: false, keyId: "key-lost", error: { code: "unknown_key" } });
  });
});
