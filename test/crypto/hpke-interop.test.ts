import { generateKeyPairSync, type KeyObject, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { Aes128Gcm, Aes256Gcm, CipherSuite, DhkemP256HkdfSha256, HkdfSha256 } from "@hpke/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CryptoPool } from "../../src/crypto/crypto-pool.js";
import { decryptBody, receiptAad, sealedFromText } from "../../src/crypto/envelope.js";
import { hpkeKeyPairOf, hpkeUnwrap, hpkeWrap, importHpkePublicKey } from "../../src/crypto/hpke.js";
import { generateRsaKeyPair, parsePrivateKey } from "../../src/crypto/keys.js";
import { HPKE_IDS, HPKE_INFO_TEXT } from "../../src/crypto/suites.js";
import { AppError } from "../../src/errors.js";
import {
  aeadSeal,
  exportSecret,
  openBase,
  sealBase,
  setupBaseRecipient,
  setupBaseSender,
} from "./support/rfc9180.js";

/**
 * Interop of the HPKE key wrap. (a) @hpke/core reproduces RFC 9180's published test
 * vector for DHKEM(P-256, HKDF-SHA256) + HKDF-SHA256 (appendix A.3.1, whose AEAD is AES-128-GCM: the
 * RFC publishes no P-256 vector with AES-256-GCM); so does the independent test implementation, down
 * to the key schedule. (b) With the service's AEAD, AES-256-GCM, the service's wrap (@hpke/core) and
 * the independent implementation open each other's output.
 */

interface Vector {
  source: string;
  base: Record<string, string | number>;
  encryptions: { sequence_number: number; pt: string; aad: string; nonce: string; ct: string }[];
  exports: { exporter_context: string; L: number; exported_value: string }[];
}

const vector = JSON.parse(
  readFileSync(new URL("./fixtures/rfc9180-a3-p256-sha256-aes128gcm.json", import.meta.url), "utf8"),
) as Vector;
const hex = (name: string) => Buffer.from(String(vector.base[name]), "hex");
const bytesOf = (value: string) => Buffer.from(value, "hex");

describe("RFC 9180 appendix A.3.1 (DHKEM(P-256, HKDF-SHA256), HKDF-SHA256, AES-128-GCM), base mode", () => {
  const suite = new CipherSuite({
    kem: new DhkemP256HkdfSha256(),
    kdf: new HkdfSha256(),
    aead: new Aes128Gcm(),
  });

  it("is the vector it claims to be", () => {
    expect(vector.source).toContain("RFC 9180");
    expect(vector.base).toMatchObject({ mode: 0, kem_id: 16, kdf_id: 1, aead_id: 1 });
    expect(HPKE_IDS).toEqual({ kem: vector.base.kem_id, kdf: vector.base.kdf_id, aead: 2 });
  });

  it("@hpke/core derives the vector's key pairs (DeriveKeyPair) from ikmR and ikmE", async () => {
    for (const [ikm, sk, pk] of [
      ["ikmR", "skRm", "pkRm"],
      ["ikmE", "skEm", "pkEm"],
    ] as const) {
      const pair = await suite.kem.deriveKeyPair(hex(ikm));
      expect(Buffer.from(await suite.kem.serializePrivateKey(pair.privateKey)).toString("hex")).toBe(
        vector.base[sk],
      );
      expect(Buffer.from(await suite.kem.serializePublicKey(pair.publicKey)).toString("hex")).toBe(
        vector.base[pk],
      );
    }
  });

  it("@hpke/core reproduces enc, every published ciphertext and the exported values with the vector's ephemeral key", async () => {
    const recipientPublicKey = await suite.kem.deserializePublicKey(hex("pkRm"));
    // `ekm` is the library's hook for a fixed ephemeral key, meant for exactly this: test vectors.
    const sender = await suite.createSenderContext({
      recipientPublicKey,
      info: hex("info"),
      ekm: hex("ikmE"),
    });
    expect(Buffer.from(sender.enc).toString("hex")).toBe(vector.base.enc);
    const wanted = new Map(vector.encryptions.map((e) => [e.sequence_number, e]));
    const last = Math.max(...wanted.keys());
    let checked = 0;
    for (let sequence = 0; sequence <= last; sequence++) {
      const entry = wanted.get(sequence);
      const pt = entry ? bytesOf(entry.pt) : Buffer.from("filler");
      const ct = Buffer.from(await sender.seal(pt, entry ? bytesOf(entry.aad) : Buffer.alloc(0)));
      if (entry) {
        expect(ct.toString("hex"), `sequence ${sequence}`).toBe(entry.ct);
        checked++;
      }
    }
    expect(checked).toBe(vector.encryptions.length);
    for (const e of vector.exports) {
      const value = Buffer.from(await sender.export(bytesOf(e.exporter_context), e.L));
      expect(value.toString("hex")).toBe(e.exported_value);
    }
  });

  it("@hpke/core opens the published ciphertexts with the vector's skRm", async () => {
    const recipientKey = await suite.kem.importKey("raw", hex("skRm"), false);
    const recipient = await suite.createRecipientContext({
      recipientKey,
      enc: hex("enc"),
      info: hex("info"),
    });
    for (const e of vector.encryptions.filter((x) => x.sequence_number <= 2)) {
      const pt = Buffer.from(await recipient.open(bytesOf(e.ct), bytesOf(e.aad)));
      expect(pt.toString("hex")).toBe(e.pt);
    }
    const [first] = vector.encryptions;
    const single = await suite.open(
      { recipientKey, enc: hex("enc"), info: hex("info") },
      bytesOf(first?.ct ?? ""),
      bytesOf(first?.aad ?? ""),
    );
    expect(Buffer.from(single).toString("hex")).toBe(first?.pt);
  });

  it("the independent test implementation reproduces the key schedule, ciphertexts and exports", () => {
    const { enc, schedule } = setupBaseSender(1, hex("pkRm"), hex("info"), hex("skEm"));
    expect(enc.toString("hex")).toBe(vector.base.enc);
    expect(schedule.sharedSecret.toString("hex")).toBe(vector.base.shared_secret);
    expect(schedule.keyScheduleContext.toString("hex")).toBe(vector.base.key_schedule_context);
    expect(schedule.secret.toString("hex")).toBe(vector.base.secret);
    expect(schedule.key.toString("hex")).toBe(vector.base.key);
    expect(schedule.baseNonce.toString("hex")).toBe(vector.base.base_nonce);
    expect(schedule.exporterSecret.toString("hex")).toBe(vector.base.exporter_secret);
    for (const e of vector.encryptions) {
      expect(aeadSeal(schedule, e.sequence_number, bytesOf(e.aad), bytesOf(e.pt)).toString("hex")).toBe(e.ct);
    }
    for (const e of vector.exports) {
      expect(exportSecret(1, schedule, bytesOf(e.exporter_context), e.L).toString("hex")).toBe(
        e.exported_value,
      );
    }
    const recipient = setupBaseRecipient(1, hex("enc"), hex("skRm"), hex("info"));
    expect(recipient.key.equals(schedule.key)).toBe(true);
  });
});

/** The raw private scalar and uncompressed public point of a P-256 key, for the independent implementation. */
function rawP256(privateKey: KeyObject): { skRm: Buffer; pkRm: Buffer } {
  const jwk = privateKey.export({ format: "jwk" });
  const b = (v: string | undefined) => Buffer.from(v ?? "", "base64url");
  return { skRm: b(jwk.d), pkRm: Buffer.concat([Buffer.from([4]), b(jwk.x), b(jwk.y)]) };
}

describe("the service's wrap (HPKE-P256-SHA256-A256GCM) against the independent implementation", () => {
  const info = Buffer.from(HPKE_INFO_TEXT, "utf8");
  const identity = { version: "1.0", receiptId: "r-9", merchantId: "m-9", transactionId: "t-9" };
  const aad = receiptAad(identity);
  const device = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const { skRm, pkRm } = rawP256(device.privateKey);
  const spki = device.publicKey.export({ type: "spki", format: "der" });

  it("the independent implementation unwraps what @hpke/core wrapped (48 bytes, enc 65 bytes)", async () => {
    const aesKey = randomBytes(32);
    const wrapped = await hpkeWrap(aesKey, await importHpkePublicKey(spki), aad);
    expect(wrapped.encapsulatedKey).toHaveLength(65);
    expect(wrapped.encryptedAesKey).toHaveLength(48);
    expect(
      openBase(2, skRm, wrapped.encapsulatedKey, info, aad, wrapped.encryptedAesKey).equals(aesKey),
    ).toBe(true);
    // Not with another info or AAD: the wrap is bound to both.
    expect(() =>
      openBase(2, skRm, wrapped.encapsulatedKey, Buffer.from("other"), aad, wrapped.encryptedAesKey),
    ).toThrow();
    expect(() =>
      openBase(
        2,
        skRm,
        wrapped.encapsulatedKey,
        info,
        receiptAad({ ...identity, receiptId: "x" }),
        wrapped.encryptedAesKey,
      ),
    ).toThrow();
  });

  it("@hpke/core unwraps what the independent implementation wrapped; a wrong AAD is an integrity failure", async () => {
    const aesKey = randomBytes(32);
    const { enc, ct } = sealBase(2, pkRm, info, aad, aesKey);
    const pair = await hpkeKeyPairOf(
      parsePrivateKey(device.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64")),
    );
    const unwrapped = await hpkeUnwrap(pair, { encapsulatedKey: enc, encryptedAesKey: ct }, aad);
    expect(unwrapped.equals(aesKey)).toBe(true);
    const error = await hpkeUnwrap(
      pair,
      { encapsulatedKey: enc, encryptedAesKey: ct },
      Buffer.from("x"),
    ).catch((e) => e);
    expect(error).toBeInstanceOf(AppError);
    expect((error as AppError).code).toBe("integrity_failure");
  });

  it("a plain @hpke/core suite with AES-256-GCM agrees with the independent one for a fixed ephemeral key", async () => {
    const suite = new CipherSuite({
      kem: new DhkemP256HkdfSha256(),
      kdf: new HkdfSha256(),
      aead: new Aes256Gcm(),
    });
    const recipientPublicKey = await suite.kem.deserializePublicKey(pkRm);
    const ikmE = randomBytes(32);
    const ephemeral = await suite.kem.deriveKeyPair(ikmE);
    const skEm = Buffer.from(await suite.kem.serializePrivateKey(ephemeral.privateKey));
    const pt = randomBytes(32);
    const library = await suite.seal({ recipientPublicKey, info, ekm: ikmE }, pt, aad);
    const independent = sealBase(2, pkRm, info, aad, pt, skEm);
    expect(Buffer.from(library.enc).equals(independent.enc)).toBe(true);
    expect(Buffer.from(library.ct).equals(independent.ct)).toBe(true);
  });

  describe("whole receipts sealed by the worker pool", () => {
    let pool: CryptoPool;
    beforeAll(async () => {
      pool = new CryptoPool({
        size: 1,
        keygenSize: 1,
        escrowPrivateKeys: [(await generateRsaKeyPair()).privateKey],
      });
    });
    afterAll(async () => {
      await pool.close();
    });

    it("open with the independent implementation and node's AES-GCM", async () => {
      const plaintext = '{"receiptId":"r-9","merchantName":"Café Zoë ☕","totalAmount":1250}';
      const text = await pool.seal({
        plaintext,
        aad: `${identity.version}\n${identity.receiptId}\n${identity.merchantId}\n${identity.transactionId}`,
        keyId: "device",
        spki: spki.toString("base64"),
      });
      const sealed = sealedFromText(text);
      const aesKey = openBase(2, skRm, sealed.encapsulatedKey as Buffer, info, aad, sealed.encryptedAesKey);
      expect(decryptBody(aesKey, sealed, aad).toString("utf8")).toBe(plaintext);
    });
  });
});
