import { createHash } from "node:crypto";
import type { Worker } from "node:worker_threads";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CryptoPool } from "../../src/crypto/crypto-pool.js";
import type { WorkerResponse } from "../../src/crypto/crypto-protocol.js";
import { sealedFromText, sealReceipt } from "../../src/crypto/envelope.js";
import { ESCROW_KEY_UNKNOWN, ESCROW_UNWRAP_FAILED, isEscrowHold } from "../../src/crypto/escrow-errors.js";
import { escrowKeyOf } from "../../src/crypto/escrow-keys.js";
import {
  type GeneratedKeyPair,
  generateP256KeyPair,
  generateRsaKeyPair,
  parsePublicKey,
  type RsaKeyPair,
} from "../../src/crypto/keys.js";
import { HPKE_P256, RSA_OAEP_256 } from "../../src/crypto/suites.js";
import { escrowKeyOf as domainEscrowKeyOf } from "../../src/domain/escrow.js";
import { AppError } from "../../src/errors.js";

/** The worker pool: P-256 keys with HPKE beside RSA, and escrow key versions. */

const aadText = "1.0\nr-1\nm-1\nt-1";
const aad = Buffer.from(aadText, "utf8");
const otherAad = Buffer.from("1.0\nr-2\nm-1\nt-1", "utf8");

let device: GeneratedKeyPair;
let otherDevice: RsaKeyPair;
let rsaUser: RsaKeyPair;
let escrowNew: RsaKeyPair;
let escrowOld: RsaKeyPair;
let pool: CryptoPool;

beforeAll(async () => {
  [otherDevice, rsaUser, escrowNew, escrowOld] = await Promise.all([
    generateP256KeyPair(),
    generateRsaKeyPair(),
    generateRsaKeyPair(),
    generateRsaKeyPair(),
  ]);
  pool = new CryptoPool({
    size: 2,
    keygenSize: 1,
    escrowPrivateKeys: [escrowNew.privateKey, escrowOld.privateKey],
  });
  device = await pool.generateKeyPair(HPKE_P256);
});

afterAll(async () => {
  await pool.close();
});

async function rejection(promise: Promise<unknown>): Promise<AppError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(AppError);
  return error as AppError;
}

const sealTo = (pair: RsaKeyPair, plaintext: string, keyId = "key-1") =>
  pool.seal({
    plaintext,
    aad: aadText,
    keyId,
    spki: pair.publicKey,
    algorithm: parsePublicKey(pair.publicKey).algorithm,
  });

describe("CryptoPool with P-256 keys", () => {
  it("generates P-256 pairs (base64 DER SPKI and PKCS#8) and RSA pairs by default", async () => {
    expect(device.algorithm).toBe(HPKE_P256);
    expect(parsePublicKey(device.publicKey)).toMatchObject({ algorithm: HPKE_P256, spki: device.publicKey });
    expect(Buffer.from(device.publicKey, "base64")).toHaveLength(91);
    const rsa = await pool.generateKeyPair();
    expect(rsa.algorithm).toBe(RSA_OAEP_256);
    expect(parsePublicKey(rsa.publicKey).algorithm).toBe(RSA_OAEP_256);
    const bogus = await rejection(pool.generateKeyPair("RSA-OAEP" as never));
    expect(bogus.code).toBe("invalid_request");
  });

  it("seals with HPKE: a 65-byte encapsulated key and a 48-byte wrapped key, opened with the device key", async () => {
    const text = await sealTo(device, '{"receiptId":"r-1","total":1250}');
    const sealed = sealedFromText(text);
    expect(sealed.encapsulatedKey).toHaveLength(65);
    expect(sealed.encapsulatedKey?.[0]).toBe(0x04);
    expect(sealed.encryptedAesKey).toHaveLength(48);
    const opened = await pool.openReceipt({
      privateKey: device.privateKey,
      expectedSpki: device.publicKey,
      sealed,
      aad,
    });
    expect(opened.toString("utf8")).toBe('{"receiptId":"r-1","total":1250}');
  });

  it("binds the HPKE wrap to the receipt's AAD: another receipt's identity does not open", async () => {
    const sealed = sealedFromText(await sealTo(device, "bound"));
    const error = await rejection(
      pool.openReceipt({
        privateKey: device.privateKey,
        expectedSpki: device.publicKey,
        sealed,
        aad: otherAad,
      }),
    );
    expect(error.code).toBe("integrity_failure");
    expect(error.message).not.toContain("bound");
  });

  it("infers the suite from the key, and refuses an algorithm that contradicts it", async () => {
    const inferred = await pool.seal({ plaintext: "x", aad: aadText, keyId: "k", spki: device.publicKey });
    expect(inferred.encapsulatedKey).toBeDefined();
    const rsaText = await pool.seal({ plaintext: "x", aad: aadText, keyId: "r", spki: rsaUser.publicKey });
    expect(rsaText.encapsulatedKey).toBeUndefined();
    const wrong = await rejection(
      pool.seal({
        plaintext: "x",
        aad: aadText,
        keyId: "k",
        spki: device.publicKey,
        algorithm: RSA_OAEP_256,
      }),
    );
    expect(wrong.code).toBe("invalid_request");
    expect(wrong.details).toBe("algorithm: must be HPKE-P256-SHA256-A256GCM for this key");
  });

  it("refuses another P-256 key with forbidden before touching the receipt", async () => {
    const sealed = sealedFromText(await sealTo(device, "secret"));
    const corrupted = { ...sealed, authTag: Buffer.alloc(16) };
    const error = await rejection(
      pool.openReceipt({
        privateKey: otherDevice.privateKey,
        expectedSpki: device.publicKey,
        sealed: corrupted,
        aad,
      }),
    );
    expect(error.code).toBe("forbidden");
  });

  it("answers a key of the other suite than the receipt's with forbidden, never a 500", async () => {
    const rsaSealed = sealedFromText(await sealTo(rsaUser, "rsa receipt"));
    const hpkeSealed = sealedFromText(await sealTo(device, "hpke receipt"));
    // A P-256 key for an RSA receipt (and the reverse), whether or not the grant names that key.
    const cases = [
      { privateKey: device.privateKey, expectedSpki: rsaUser.publicKey, sealed: rsaSealed },
      { privateKey: device.privateKey, expectedSpki: device.publicKey, sealed: rsaSealed },
      { privateKey: rsaUser.privateKey, expectedSpki: device.publicKey, sealed: hpkeSealed },
      { privateKey: rsaUser.privateKey, expectedSpki: rsaUser.publicKey, sealed: hpkeSealed },
    ];
    for (const request of cases) {
      const error = await rejection(pool.openReceipt({ ...request, aad }));
      expect(error.code).toBe("forbidden");
    }
    const stated = await rejection(
      pool.openReceipt({
        privateKey: device.privateKey,
        expectedSpki: device.publicKey,
        sealed: hpkeSealed,
        algorithm: RSA_OAEP_256,
        aad,
      }),
    );
    expect(stated.code, `${stated.message} ${JSON.stringify(stated.violations)}`).toBe("forbidden");
    expect(stated.message).toContain("HPKE-P256-SHA256-A256GCM");
  });

  it("answers a tampered encapsulated key as an integrity failure and keeps working", async () => {
    const sealed = sealedFromText(await sealTo(device, "tamper"));
    const enc = Buffer.from(sealed.encapsulatedKey as Buffer);
    enc[10] = (enc[10] ?? 0) ^ 1;
    const error = await rejection(
      pool.openReceipt({
        privateKey: device.privateKey,
        expectedSpki: device.publicKey,
        sealed: { ...sealed, encapsulatedKey: enc },
        aad,
      }),
    );
    expect(error.code).toBe("integrity_failure");
    const again = await pool.openReceipt({
      privateKey: device.privateKey,
      expectedSpki: device.publicKey,
      sealed,
      aad,
    });
    expect(again.toString()).toBe("tamper");
  });

  it("answers mixed RSA and HPKE work of one turn, each to its own caller, though HPKE answers come later", async () => {
    const plaintexts = Array.from({ length: 30 }, (_, i) => `receipt ${i}`);
    const texts = await Promise.all(plaintexts.map((p, i) => sealTo(i % 3 === 0 ? rsaUser : device, p)));
    const opened = await Promise.all(
      texts.map((text, i) => {
        const owner = i % 3 === 0 ? rsaUser : device;
        return pool.openReceipt({
          privateKey: owner.privateKey,
          expectedSpki: owner.publicKey,
          sealed: sealedFromText(text),
          aad,
        });
      }),
    );
    expect(opened.map((b) => b.toString())).toEqual(plaintexts);
    expect(texts.map((t) => t.encapsulatedKey === undefined)).toEqual(plaintexts.map((_, i) => i % 3 === 0));
  });
});

describe("CryptoPool worker answers", () => {
  it("answers asynchronous HPKE work on its own, after the batched RSA seals of the same turn", async () => {
    const one = new CryptoPool({ size: 1, keygenSize: 1, escrowPrivateKeys: [escrowNew.privateKey] });
    try {
      await one.seal({ plaintext: "warm-up", aad: aadText, keyId: "r", spki: rsaUser.publicKey });
      const worker = (one as unknown as { slots: { worker: Worker | undefined }[] }).slots[0]?.worker;
      const messages: string[][] = [];
      worker?.on("message", (responses: WorkerResponse[]) => {
        messages.push(
          responses.map((r) =>
            r.ok && typeof r.result === "string" && r.result.split(".").length === 5 ? "hpke" : "rsa",
          ),
        );
      });
      const seal = (spki: string, plaintext: string) =>
        one.seal({ plaintext, aad: aadText, keyId: spki.slice(-8), spki });
      // One turn, one message to the worker: an HPKE seal first, then two RSA seals.
      const results = await Promise.all([
        seal(device.publicKey, "h"),
        seal(rsaUser.publicKey, "r1"),
        seal(rsaUser.publicKey, "r2"),
      ]);
      expect(messages).toEqual([["rsa", "rsa"], ["hpke"]]);
      expect(results.map((t) => t.encapsulatedKey !== undefined)).toEqual([true, false, false]);
    } finally {
      await one.close();
    }
  });
});

describe("CryptoPool escrow key versions", () => {
  it("names each escrow key esc_ + 16 hex of SHA-256 of its DER SPKI, in configuration order", () => {
    expect(pool.escrowKeys.map((k) => k.spki)).toEqual([escrowNew.publicKey, escrowOld.publicKey]);
    for (const key of pool.escrowKeys) {
      const digest = createHash("sha256").update(Buffer.from(key.spki, "base64")).digest("hex");
      expect(key.keyId).toBe(`esc_${digest.slice(0, 16)}`);
      expect(key.algorithm).toBe(RSA_OAEP_256);
    }
    expect(domainEscrowKeyOf(escrowOld.privateKey)).toEqual(pool.escrowKeys[1]);
    expect(escrowKeyOf(escrowNew.privateKey)).toEqual(pool.escrowKeys[0]);
  });

  it("releases a receipt sealed to an older escrow key to a P-256 device; the ciphertext is unchanged", async () => {
    const sealed = sealReceipt(
      Buffer.from("escrowed long ago"),
      aad,
      parsePublicKey(escrowOld.publicKey).key,
    );
    const rewrapped = await pool.rewrapFromEscrow({
      escrowKeyId: pool.escrowKeys[1]?.keyId as string,
      encryptedAesKey: sealed.encryptedAesKey,
      sealed: sealed,
      aad,
      target: { keyId: "dev", spki: device.publicKey, algorithm: HPKE_P256 },
    });
    const released = sealedFromText({
      ...rewrapped,
      iv: sealed.iv.toString("base64"),
      ciphertext: sealed.ciphertext.toString("base64"),
      authTag: sealed.authTag.toString("base64"),
    });
    expect(released.encapsulatedKey).toHaveLength(65);
    expect(released.encryptedAesKey).toHaveLength(48);
    const opened = await pool.openReceipt({
      privateKey: device.privateKey,
      expectedSpki: device.publicKey,
      sealed: released,
      aad,
    });
    expect(opened.toString()).toBe("escrowed long ago");
    // The HPKE wrap is bound to the receipt's AAD like its ciphertext.
    const moved = await rejection(
      pool.openReceipt({
        privateKey: device.privateKey,
        expectedSpki: device.publicKey,
        sealed: released,
        aad: otherAad,
      }),
    );
    expect(moved.code).toBe("integrity_failure");
  });

  it("holds a receipt whose escrow key is unknown or does not unwrap it (conflict, isEscrowHold)", async () => {
    const sealed = sealReceipt(Buffer.from("held"), aad, parsePublicKey(escrowOld.publicKey).key);
    const target = { keyId: "u", spki: rsaUser.publicKey };
    const unknown = await rejection(
      pool.rewrapFromEscrow({
        escrowKeyId: "esc_0000000000000000",
        encryptedAesKey: sealed.encryptedAesKey,
        sealed: sealed,
        aad,
        target,
      }),
    );
    expect(unknown).toMatchObject({ code: "conflict", message: ESCROW_KEY_UNKNOWN });
    const wrongKey = await rejection(
      pool.rewrapFromEscrow({
        escrowKeyId: pool.escrowKeys[0]?.keyId as string,
        encryptedAesKey: sealed.encryptedAesKey,
        sealed: sealed,
        aad,
        target,
      }),
    );
    expect(wrongKey).toMatchObject({ code: "conflict", message: ESCROW_UNWRAP_FAILED });
    for (const error of [unknown, wrongKey]) expect(isEscrowHold(error)).toBe(true);
    expect(isEscrowHold(new AppError("conflict", "Duplicate receiptId."))).toBe(false);
    // The workers are alive: the right key still releases it.
    const ok = await pool.rewrapFromEscrow({
      escrowKeyId: pool.escrowKeys[1]?.keyId as string,
      encryptedAesKey: sealed.encryptedAesKey,
      sealed: sealed,
      aad,
      target,
    });
    expect(Buffer.from(ok.encryptedAesKey, "base64")).toHaveLength(256);
  });

  it("reads an escrow key's suite from the key: a P-256 escrow key releases too", async () => {
    const ecEscrow = await generateP256KeyPair();
    const ecPool = new CryptoPool({ size: 1, keygenSize: 1, escrowPrivateKeys: [ecEscrow.privateKey] });
    try {
      expect(ecPool.escrowKeys[0]?.algorithm).toBe(HPKE_P256);
      const sealed = sealedFromText(
        await ecPool.seal({ plaintext: "ec escrow", aad: aadText, keyId: "esc", spki: ecEscrow.publicKey }),
      );
      const rewrapped = await ecPool.rewrapFromEscrow({
        escrowKeyId: ecPool.escrowKeys[0]?.keyId as string,
        encryptedAesKey: sealed.encryptedAesKey,
        sealed: sealed,
        encapsulatedKey: sealed.encapsulatedKey,
        aad,
        target: { keyId: "u", spki: rsaUser.publicKey },
      });
      expect(rewrapped.encapsulatedKey).toBeUndefined();
      const released = { ...sealed, encryptedAesKey: Buffer.from(rewrapped.encryptedAesKey, "base64") };
      delete released.encapsulatedKey;
      const opened = await ecPool.openReceipt({
        privateKey: rsaUser.privateKey,
        expectedSpki: rsaUser.publicKey,
        sealed: released,
        aad,
      });
      expect(opened.toString()).toBe("ec escrow");
    } finally {
      await ecPool.close();
    }
  });

  it("refuses an empty, broken or repeated escrow key list at construction, naming the entry", () => {
    const fieldsOf = (fn: () => unknown) => {
      try {
        fn();
      } catch (error) {
        expect(error).toBeInstanceOf(AppError);
        return (error as AppError).violations.map((v) => v.field);
      }
      throw new Error("expected an AppError");
    };
    expect(fieldsOf(() => new CryptoPool({ escrowPrivateKeys: [] }))).toEqual(["escrowPrivateKeys"]);
    expect(fieldsOf(() => new CryptoPool({ escrowPrivateKeys: [escrowNew.privateKey, "junk"] }))).toEqual([
      "escrowPrivateKeys[1]",
    ]);
    expect(
      fieldsOf(() => new CryptoPool({ escrowPrivateKeys: [escrowNew.privateKey, escrowNew.privateKey] })),
    ).toEqual(["escrowPrivateKeys[1]"]);
  });
});
