import { constants, createPublicKey, generateKeyPairSync, type KeyObject, privateDecrypt } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  AES_KEY_BYTES,
  AUTH_TAG_BYTES,
  IV_BYTES,
  openSealedReceipt,
  proveAesKey,
  type ReceiptIdentity,
  receiptAad,
  type SealedReceipt,
  sealReceipt,
  unwrapAesKey,
  wrapAesKey,
} from "../../src/crypto/envelope.js";
import { AppError } from "../../src/errors.js";

const alice = generateKeyPairSync("rsa", { modulusLength: 2048 });
const bob = generateKeyPairSync("rsa", { modulusLength: 2048 });

const identity: ReceiptIdentity = {
  version: "1.0",
  receiptId: "rcpt-001",
  merchantId: "merchant-42",
  transactionId: "txn-9",
};
const aad = receiptAad(identity);
const plaintext = Buffer.from(
  JSON.stringify({ receiptId: "rcpt-001", merchantName: "Café Zoë", totalAmount: 1250 }),
);

function unwrap(sealed: SealedReceipt, privateKey: KeyObject): Buffer {
  return privateDecrypt(
    { key: privateKey, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: "sha256" },
    sealed.encryptedAesKey,
  );
}

/** A copy of `buffer` with one bit flipped at `index`. */
function flipped(buffer: Buffer, index = 0): Buffer {
  const copy = Buffer.from(buffer);
  copy[index] = (copy[index] ?? 0) ^ 0x01;
  return copy;
}

function expectIntegrityFailure(fn: () => unknown): void {
  let caught: unknown;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(AppError);
  const error = caught as AppError;
  expect(error.code).toBe("integrity_failure");
  expect(error.message).toBe("The sealed receipt failed its integrity check.");
}

describe("receiptAad", () => {
  it("is the UTF-8 of version, receiptId, merchantId and transactionId joined by newlines", () => {
    expect(aad.toString("hex")).toBe(
      Buffer.from("1.0\nrcpt-001\nmerchant-42\ntxn-9", "utf8").toString("hex"),
    );
    expect(receiptAad({ ...identity, merchantId: "Zoë" })).toEqual(
      Buffer.from("1.0\nrcpt-001\nZo\u00eb\ntxn-9"),
    );
  });

  it("refuses a line break inside a component, which would make two identities collide", () => {
    let caught: unknown;
    try {
      receiptAad({ ...identity, receiptId: "a\nb", transactionId: "c\n" });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(AppError);
    expect((caught as AppError).code).toBe("invalid_request");
    expect((caught as AppError).violations.map((v) => v.field)).toEqual(["receiptId", "transactionId"]);
  });
});

describe("sealReceipt / openSealedReceipt", () => {
  it("round-trips and has the sizes", () => {
    const sealed = sealReceipt(plaintext, aad, alice.publicKey);
    expect(sealed.encryptedAesKey).toHaveLength(256);
    expect(sealed.iv).toHaveLength(IV_BYTES);
    expect(sealed.iv).toHaveLength(12);
    expect(sealed.authTag).toHaveLength(AUTH_TAG_BYTES);
    expect(sealed.authTag).toHaveLength(16);
    expect(sealed.ciphertext).toHaveLength(plaintext.length);
    expect(unwrap(sealed, alice.privateKey)).toHaveLength(AES_KEY_BYTES);
    expect(openSealedReceipt(sealed, aad, alice.privateKey).equals(plaintext)).toBe(true);
  });

  it("seals an empty plaintext too", () => {
    const sealed = sealReceipt(new Uint8Array(0), aad, alice.publicKey);
    expect(openSealedReceipt(sealed, aad, alice.privateKey)).toHaveLength(0);
  });

  it("draws a fresh AES key and IV for every receipt", () => {
    const envelopes = Array.from({ length: 5 }, () => sealReceipt(plaintext, aad, alice.publicKey));
    const keys = new Set(envelopes.map((s) => unwrap(s, alice.privateKey).toString("hex")));
    const ivs = new Set(envelopes.map((s) => s.iv.toString("hex")));
    const ciphertexts = new Set(envelopes.map((s) => s.ciphertext.toString("hex")));
    expect(keys.size).toBe(5);
    expect(ivs.size).toBe(5);
    expect(ciphertexts.size).toBe(5);
  });

  it("fails when the ciphertext, IV, tag or wrapped key is tampered with", () => {
    const sealed = sealReceipt(plaintext, aad, alice.publicKey);
    const last = sealed.ciphertext.length - 1;
    const tampered: SealedReceipt[] = [
      { ...sealed, ciphertext: flipped(sealed.ciphertext) },
      { ...sealed, ciphertext: flipped(sealed.ciphertext, last) },
      { ...sealed, ciphertext: sealed.ciphertext.subarray(0, last) },
      { ...sealed, iv: flipped(sealed.iv) },
      { ...sealed, iv: sealed.iv.subarray(0, 8) },
      { ...sealed, authTag: flipped(sealed.authTag, 15) },
      { ...sealed, authTag: sealed.authTag.subarray(0, 12) },
      { ...sealed, encryptedAesKey: flipped(sealed.encryptedAesKey, 100) },
    ];
    for (const envelope of tampered)
      expectIntegrityFailure(() => openSealedReceipt(envelope, aad, alice.privateKey));
  });

  it("fails when any component of the receipt identity differs (the AAD binds it)", () => {
    const sealed = sealReceipt(plaintext, aad, alice.publicKey);
    const others: ReceiptIdentity[] = [
      { ...identity, version: "1.1" },
      { ...identity, receiptId: "rcpt-002" },
      { ...identity, merchantId: "merchant-43" },
      { ...identity, transactionId: "txn-10" },
    ];
    for (const other of others) {
      expectIntegrityFailure(() => openSealedReceipt(sealed, receiptAad(other), alice.privateKey));
    }
    expectIntegrityFailure(() => openSealedReceipt(sealed, new Uint8Array(0), alice.privateKey));
  });

  it("fails with another private key, saying nothing about the plaintext", () => {
    const sealed = sealReceipt(plaintext, aad, alice.publicKey);
    expectIntegrityFailure(() => openSealedReceipt(sealed, aad, bob.privateKey));
  });
});

describe("the AAD-bound RSA wrap (keyBundle.aadBound)", () => {
  it("is RSA-OAEP-256 with the receipt's AAD as OAEP label: opens only with that label", () => {
    const sealed = sealReceipt(plaintext, aad, alice.publicKey, true);
    expect(openSealedReceipt(sealed, aad, alice.privateKey, true).equals(plaintext)).toBe(true);
    const byHand = privateDecrypt(
      {
        key: alice.privateKey,
        padding: constants.RSA_PKCS1_OAEP_PADDING,
        oaepHash: "sha256",
        oaepLabel: aad,
      },
      sealed.encryptedAesKey,
    );
    expect(byHand).toHaveLength(AES_KEY_BYTES);
    // Read as an unbound (v1) bundle, or under another receipt's AAD, it does not unwrap at all.
    expectIntegrityFailure(() => openSealedReceipt(sealed, aad, alice.privateKey, false));
    const other = receiptAad({ ...identity, receiptId: "rcpt-002" });
    expectIntegrityFailure(() => unwrapAesKey(sealed.encryptedAesKey, alice.privateKey, other));
    // ...and an unbound bundle read as bound fails too: an opener must follow the mark.
    const unbound = sealReceipt(plaintext, aad, alice.publicKey);
    expectIntegrityFailure(() => openSealedReceipt(unbound, aad, alice.privateKey, true));
  });

  it("binds a label to its own wrap only, and leaves the caller's key objects as they were", () => {
    // The wraps use a copy of each key carrying the OAEP options, its label set for one call: a label
    // left behind would bind the next unbound wrap (and unwrap) to the same key.
    const bound = sealReceipt(plaintext, aad, bob.publicKey, true);
    const unbound = sealReceipt(plaintext, aad, bob.publicKey);
    const byHand = (sealed: SealedReceipt, label?: Buffer) =>
      privateDecrypt(
        {
          key: bob.privateKey,
          padding: constants.RSA_PKCS1_OAEP_PADDING,
          oaepHash: "sha256",
          oaepLabel: label,
        },
        sealed.encryptedAesKey,
      );
    expect(byHand(bound, aad)).toHaveLength(AES_KEY_BYTES);
    expect(byHand(unbound)).toHaveLength(AES_KEY_BYTES);
    expect(unwrapAesKey(bound.encryptedAesKey, bob.privateKey, aad)).toHaveLength(AES_KEY_BYTES);
    expect(openSealedReceipt(unbound, aad, bob.privateKey, false).equals(plaintext)).toBe(true);
    for (const key of [bob.publicKey, bob.privateKey]) {
      expect(Object.keys(key)).toEqual([]);
    }
  });
});

describe("proveAesKey", () => {
  it("accepts a receipt's own key and refuses a key lifted from another receipt", () => {
    const mine = sealReceipt(plaintext, aad, alice.publicKey);
    const theirs = sealReceipt(plaintext, aad, alice.publicKey);
    const key = unwrap(mine, alice.privateKey);
    expect(() => proveAesKey(key, mine, aad)).not.toThrow();
    expectIntegrityFailure(() => proveAesKey(key, theirs, aad));
    expectIntegrityFailure(() => proveAesKey(key, mine, receiptAad({ ...identity, transactionId: "t2" })));
    expectIntegrityFailure(() => proveAesKey(key, { ...mine, authTag: flipped(mine.authTag) }, aad));
  });

  it("moves a key between recipients once proven, leaving the ciphertext byte-for-byte the same", () => {
    const sealed = sealReceipt(plaintext, aad, alice.publicKey, true);
    const key = unwrapAesKey(sealed.encryptedAesKey, alice.privateKey, aad);
    proveAesKey(key, sealed, aad);
    const released: SealedReceipt = { ...sealed, encryptedAesKey: wrapAesKey(key, bob.publicKey) };
    expect(openSealedReceipt(released, aad, bob.privateKey).equals(plaintext)).toBe(true);
    expectIntegrityFailure(() => openSealedReceipt(released, aad, alice.privateKey, true));
    expect(createPublicKey(bob.privateKey).equals(bob.publicKey)).toBe(true);
  });
});
