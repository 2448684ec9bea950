import { generateKeyPairSync } from "node:crypto";
import { readFileSync } from "node:fs";
import { create, toJson } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { beforeAll, describe, expect, it } from "vitest";
import { EncryptedReceiptSchema, ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import {
  EnvelopeError,
  importRsaKey,
  openReceipt,
  rewrapKeyBundle,
  sealReceipt,
} from "../../src/client/webcrypto.js";
import { openSealedReceipt, receiptAad, sealReceipt as serviceSeal } from "../../src/crypto/envelope.js";
import {
  generateRsaKeyPair,
  parsePrivateKey,
  parsePublicKey,
  type RsaKeyPair,
} from "../../src/crypto/keys.js";
import { sealedPlaintextOf, validateReceipt } from "../../src/domain/receipt-rules.js";
import { plaintextOf, receiptFromPlaintext } from "../../src/domain/sealing.js";
import { encryptedReceiptOf } from "../../src/rpc/convert.js";
import { rejectionOf } from "./support.js";

/**
 * The client's WebCrypto envelope and the service's Node one are the same
 * format, both ways, down to the plaintext bytes.
 */

const NOW = new Date("2026-01-01T12:00:00Z");

/** A receipt through the service's own validation: what the service would seal for it. */
const valid = validateReceipt(
  create(ReceiptSchema, {
    version: "1.0",
    receiptId: "rcpt-0001",
    merchantId: "merchant_42",
    merchantName: "Bäckerei Müller – Filiale 3",
    transactionId: "txn:2026:0001",
    transactionDate: timestampFromDate(new Date("2025-12-31T10:00:00Z")),
    currency: "EUR",
    recipientHashedPan: "ab".repeat(32),
    merchantCity: "Berlin",
    cardLast4: "4242",
    subtotal: 700n,
    taxAmount: 133n,
    totalAmount: 833n,
    items: [
      {
        lineItemId: "li-1",
        name: "Brezel 🥨",
        quantity: 2n,
        unitPrice: 350n,
        totalPrice: 700n,
        taxes: [{ name: "VAT", rate: 0.19, amount: 133n }],
      },
    ],
    mockItems: false,
    amount: 833n,
    cardNonce: "cnon:card-nonce-ok",
  }),
  { mode: "payment", now: NOW },
);

let pair: RsaKeyPair;
let other: RsaKeyPair;

beforeAll(async () => {
  [pair, other] = await Promise.all([generateRsaKeyPair(), generateRsaKeyPair()]);
});

/** Seals `valid` the way the service does and returns the API's `EncryptedReceipt` message. */
function sealedByService() {
  const sealed = serviceSeal(plaintextOf(valid), receiptAad(valid), parsePublicKey(pair.publicKey).key);
  return encryptedReceiptOf({
    id: "rcp_1",
    receiptId: valid.receiptId,
    merchantId: valid.merchantId,
    transactionId: valid.transactionId,
    version: valid.version,
    merchantTenantId: "ten_m",
    panHash: "hmac",
    keyBundle: {
      keyId: "key-1",
      algorithm: "RSA-OAEP-256",
      encryptedAesKey: sealed.encryptedAesKey.toString("base64"),
    },
    ciphertext: sealed.ciphertext.toString("base64"),
    iv: sealed.iv.toString("base64"),
    authTag: sealed.authTag.toString("base64"),
    createdAt: NOW,
    isEscrowed: false,
  });
}

const pemOf = (label: string, base64: string) =>
  `-----BEGIN ${label}-----\n${base64.match(/.{1,64}/g)?.join("\n")}\n-----END ${label}-----\n`;

describe("openReceipt (WebCrypto) opens what the service sealed", () => {
  it("from the JSON of the REST surface (base64 strings), with the same plaintext bytes", async () => {
    const json = toJson(EncryptedReceiptSchema, sealedByService()) as Record<string, unknown>;
    expect(typeof json.ciphertext).toBe("string");

    const opened = await openReceipt(json as unknown as Parameters<typeof openReceipt>[0], pair.privateKey);

    expect(opened).toEqual(sealedPlaintextOf(valid));
    expect(Buffer.from(JSON.stringify(opened), "utf8").equals(plaintextOf(valid))).toBe(true);
  });

  it("from the generated message (Uint8Array fields) and a PEM private key", async () => {
    const opened = await openReceipt(sealedByService(), pemOf("PRIVATE KEY", pair.privateKey));
    expect(opened).toEqual(sealedPlaintextOf(valid));
  });

  it("with an already imported CryptoKey", async () => {
    const key = await importRsaKey(pair.privateKey, "private");
    expect((await openReceipt(sealedByService(), key)).receiptId).toBe("rcpt-0001");
  });

  it("refuses the wrong key, a moved ciphertext and a flipped tag bit as integrity failures", async () => {
    const message = sealedByService();
    const wrongKey = await rejectionOf(openReceipt(message, other.privateKey));
    const moved = await rejectionOf(openReceipt({ ...message, receiptId: "rcpt-0002" }, pair.privateKey));
    const tag = message.authTag.slice();
    tag[0] = (tag[0] ?? 0) ^ 1;
    const flipped = await rejectionOf(openReceipt({ ...message, authTag: tag }, pair.privateKey));

    for (const err of [wrongKey, moved, flipped]) {
      expect(err).toBeInstanceOf(EnvelopeError);
      expect(err).toMatchObject({ code: "integrity_failure" });
    }
  });

  it("refuses a malformed envelope or key before decrypting", async () => {
    const message = sealedByService();
    const shortIv = await rejectionOf(openReceipt({ ...message, iv: new Uint8Array(8) }, pair.privateKey));
    const notBase64 = await rejectionOf(openReceipt({ ...message, ciphertext: "***" }, pair.privateKey));
    const noBundle = await rejectionOf(openReceipt({ ...message, keyBundle: undefined }, pair.privateKey));
    const pkcs1 = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey.export({
      type: "pkcs1",
      format: "pem",
    }) as string;
    const pkcs1Pem = await rejectionOf(openReceipt(message, pkcs1));
    const publicAsPrivate = await rejectionOf(openReceipt(message, pair.publicKey));

    expect([shortIv, notBase64, noBundle]).toMatchObject(Array(3).fill({ code: "invalid_envelope" }));
    expect([pkcs1Pem, publicAsPrivate]).toMatchObject(Array(2).fill({ code: "invalid_key" }));
  });
});

/** The validated receipt as JSON, input-only fields included: what a merchant would send. */
const requestJson = () => JSON.parse(JSON.stringify(valid)) as Parameters<typeof sealReceipt>[0];

describe("sealReceipt (WebCrypto) seals what the service opens", () => {
  it("with the exact plaintext bytes the service itself would seal, input-only fields left out", async () => {
    const envelope = await sealReceipt(requestJson(), pair.publicKey, { keyId: "key-1" });

    const plaintext = openSealedReceipt(
      {
        encryptedAesKey: Buffer.from(envelope.keyBundle.encryptedAesKey, "base64"),
        iv: Buffer.from(envelope.iv, "base64"),
        ciphertext: Buffer.from(envelope.ciphertext, "base64"),
        authTag: Buffer.from(envelope.authTag, "base64"),
      },
      receiptAad(valid),
      parsePrivateKey(pair.privateKey),
    );

    expect(plaintext.equals(plaintextOf(valid))).toBe(true);
    expect(plaintext.toString("utf8")).not.toContain("recipientHashedPan");
    expect(receiptFromPlaintext(plaintext).items[0]?.totalPrice).toBe(700n);
    expect(envelope).toMatchObject({
      version: "1.0",
      receiptId: "rcpt-0001",
      merchantId: "merchant_42",
      transactionId: "txn:2026:0001",
      keyId: "key-1",
      keyBundle: { keyId: "key-1", algorithm: "RSA-OAEP-256" },
    });
    expect(Buffer.from(envelope.iv, "base64")).toHaveLength(12);
    expect(Buffer.from(envelope.authTag, "base64")).toHaveLength(16);
  });

  it("defaults the version to 1.0 and binds it in the AAD; accepts a PEM public key", async () => {
    const { version: _version, ...unversioned } = requestJson();
    const envelope = await sealReceipt(unversioned, pemOf("PUBLIC KEY", pair.publicKey));

    const plaintext = openSealedReceipt(
      {
        encryptedAesKey: Buffer.from(envelope.keyBundle.encryptedAesKey, "base64"),
        iv: Buffer.from(envelope.iv, "base64"),
        ciphertext: Buffer.from(envelope.ciphertext, "base64"),
        authTag: Buffer.from(envelope.authTag, "base64"),
      },
      receiptAad({ ...valid, version: "1.0" }),
      parsePrivateKey(pair.privateKey),
    );
    expect(JSON.parse(plaintext.toString("utf8"))).toMatchObject({ version: "1.0", receiptId: "rcpt-0001" });
    expect(envelope.version).toBe("1.0");
  });

  it("round-trips through openReceipt, with a fresh key and IV each time", async () => {
    const first = await sealReceipt(requestJson(), pair.publicKey);
    const second = await sealReceipt(requestJson(), pair.publicKey);

    expect(await openReceipt(first, pair.privateKey)).toEqual(sealedPlaintextOf(valid));
    expect(second.iv).not.toBe(first.iv);
    expect(second.keyBundle.encryptedAesKey).not.toBe(first.keyBundle.encryptedAesKey);
  });

  it("refuses an identity that contradicts the receipt, a missing id and a line break", async () => {
    const contradicts = await rejectionOf(sealReceipt(requestJson(), pair.publicKey, { receiptId: "other" }));
    const missing = await rejectionOf(sealReceipt({ ...requestJson(), transactionId: "" }, pair.publicKey));
    const lineBreak = await rejectionOf(
      sealReceipt({ ...requestJson(), merchantId: "m\n1" }, pair.publicKey),
    );

    expect(contradicts).toMatchObject({ code: "invalid_receipt" });
    expect(missing).toMatchObject({ code: "invalid_receipt" });
    expect(lineBreak).toMatchObject({ code: "invalid_envelope" });
  });

  it("refuses an RSA key under 2048 bits, as the service does", async () => {
    const weak = generateKeyPairSync("rsa", { modulusLength: 1024 })
      .publicKey.export({ type: "spki", format: "der" })
      .toString("base64");
    expect(await rejectionOf(sealReceipt(requestJson(), weak))).toMatchObject({ code: "invalid_key" });
  });
});

describe("the AAD-bound RSA form (keyBundle.aadBound), both ways", () => {
  it("opens what the service sealed bound, and seals bound what the service opens", async () => {
    const bound = serviceSeal(
      plaintextOf(valid),
      receiptAad(valid),
      parsePublicKey(pair.publicKey).key,
      true,
    );
    const envelope = {
      ...valid,
      keyBundle: { encryptedAesKey: bound.encryptedAesKey.toString("base64"), aadBound: true },
      ciphertext: bound.ciphertext.toString("base64"),
      iv: bound.iv.toString("base64"),
      authTag: bound.authTag.toString("base64"),
    };
    expect(await openReceipt(envelope, pair.privateKey)).toEqual(sealedPlaintextOf(valid));
    // The mark is what tells an opener the label: read as v1 (no mark), the wrap does not open.
    const unmarked = { ...envelope, keyBundle: { encryptedAesKey: envelope.keyBundle.encryptedAesKey } };
    expect(await rejectionOf(openReceipt(unmarked, pair.privateKey))).toMatchObject({
      code: "integrity_failure",
    });

    const sealed = await sealReceipt(requestJson(), pair.publicKey, { keyId: "k", aadBound: true });
    expect(sealed.keyBundle.aadBound).toBe(true);
    const sealedParts = {
      encryptedAesKey: Buffer.from(sealed.keyBundle.encryptedAesKey, "base64"),
      iv: Buffer.from(sealed.iv, "base64"),
      ciphertext: Buffer.from(sealed.ciphertext, "base64"),
      authTag: Buffer.from(sealed.authTag, "base64"),
    };
    const aad = receiptAad(sealed);
    const key = parsePrivateKey(pair.privateKey);
    expect(openSealedReceipt(sealedParts, aad, key, true)).toEqual(plaintextOf(valid));
    expect(() => openSealedReceipt(sealedParts, aad, key, false)).toThrow();
    // Unbound stays the default: the v1 form every RSA opener reads.
    expect((await sealReceipt(requestJson(), pair.publicKey)).keyBundle.aadBound).toBeUndefined();
  });

  it("rewrapKeyBundle refuses a wrapped key lifted from another receipt, and re-wraps a receipt's own", async () => {
    const escrowed = await sealReceipt(requestJson(), pair.publicKey, { keyId: "iek", aadBound: true });
    const target = { keyId: "user", publicKey: other.publicKey };
    const released = await rewrapKeyBundle(escrowed, pair.privateKey, target);
    expect(released.aadBound).toBeUndefined();
    const opened = await openReceipt({ ...escrowed, keyBundle: released }, other.privateKey);
    expect(opened).toEqual(sealedPlaintextOf(valid));

    // A planted receipt: another receipt's identity and ciphertext around this receipt's wrapped key,
    // unbound (as an older merchant client would seal) so that the unwrap itself succeeds.
    const legacy = await sealReceipt(requestJson(), pair.publicKey, { keyId: "iek" });
    const decoy = await sealReceipt({ ...requestJson(), receiptId: "planted" }, pair.publicKey, {
      keyId: "iek",
    });
    const planted = { ...decoy, keyBundle: legacy.keyBundle };
    expect(await rejectionOf(rewrapKeyBundle(planted, pair.privateKey, target))).toMatchObject({
      code: "integrity_failure",
    });
  });
});

describe("the WebCrypto module", () => {
  // What each browser-safe module may import: its siblings, @hpke/core (WebCrypto only), the
  // receipt field rules and the key encoding checks the service shares (checked below), the
  // key-transparency library (src/kt, whose own test keeps it free of Node), and the generated
  // receipt messages whose types the receipt's JSON types are made from.
  const allowed: Record<string, string[]> = {
    "webcrypto.ts": [
      "../../gen/receipts/v1/receipt_pb.js",
      "../crypto/suites.js",
      "../kt/base64.js",
      "../receipt-fields.js",
      "./client-keys.js",
      "./key-trust.js",
      "./p256.js",
    ],
    "key-trust.ts": [
      "../crypto/suites.js",
      "../kt/bytes.js",
      "../kt/hash.js",
      "../kt/policy.js",
      "../kt/signatures.js",
      "../kt/verify.js",
      "../kt/wire.js",
      "./client-keys.js",
    ],
    "key-binding.ts": [
      "../crypto/suites.js",
      "../kt/bytes.js",
      "../kt/hash.js",
      "../kt/signatures.js",
      "../kt/statements.js",
      "../kt/wire.js",
      "./client-keys.js",
    ],
    "device-checks.ts": [
      "../kt/bytes.js",
      "../kt/hash.js",
      "../kt/statements.js",
      "../kt/wire.js",
      "./key-trust.js",
    ],
    "../receipt-fields.ts": [
      "@bufbuild/protobuf",
      "@bufbuild/protobuf/wkt",
      "canonicalize",
      "../gen/receipts/v1/receipt_pb.js",
      "./proto-scalars.js",
    ],
    "../proto-scalars.ts": ["@bufbuild/protobuf", "@bufbuild/protobuf/wkt"],
    "client-keys.ts": [
      "../crypto/hpke-suites.js",
      "../crypto/key-encoding.js",
      "../crypto/suites.js",
      "../kt/base64.js",
      "./p256.js",
    ],
    // The key suites' registry, shared with the service: it imports nothing.
    "../crypto/suites.ts": [],
    "../crypto/key-encoding.ts": ["./asn1.js", "./curves.js", "./suites.js"],
    "../crypto/asn1.ts": [],
    "../crypto/curves.ts": ["./asn1.js", "./suites.js"],
    // The HPKE cipher suites of the key suites, shared with the service.
    "../crypto/hpke-suites.ts": ["@hpke/core", "./suites.js"],
    "p256.ts": ["../crypto/hpke-suites.js", "../crypto/suites.js"],
    "key-ring.ts": ["./signatures.js", "./webcrypto.js"],
    "signatures.ts": ["../kt/base64.js", "../receipt-fields.js"],
    // Base64 without Buffer, shared with the key-transparency library: it imports nothing.
    "../kt/base64.ts": [],
  };
  it.each(Object.keys(allowed))("%s uses no Node module and no Buffer", (file) => {
    const source = readFileSync(new URL(`../../src/client/${file}`, import.meta.url), "utf8")
      .replace(/\/\*[\s\S]*?\*\//g, "")
      .replace(/^\s*\/\/.*$/gm, "");
    expect(source).not.toMatch(/from\s+["']node:|require\(|\bBuffer\b|\batob\b|\bbtoa\b/);
    const imports = new Set([...source.matchAll(/from\s+["']([^"']+)["']/g)].map((m) => m[1]));
    expect([...imports]).toEqual(allowed[file]);
  });
});
