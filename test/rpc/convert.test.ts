import { create, equals, toBinary } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import { LookupKeyResponseSchema } from "../../gen/receipts/v1/keys_pb.js";
import { EncryptedReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { KEY_ALGORITHMS } from "../../src/crypto/suites.js";
import type { LookedUpKey } from "../../src/domain/routing.js";
import { timestampOf } from "../../src/proto-scalars.js";
import { base64Of, bytesFromBase64 } from "../../src/rpc/base64-bytes.js";
import { encryptedReceiptOf, encryptedReceiptWith, lookupKeyResponseOf } from "../../src/rpc/convert.js";
import { messageToJson } from "../../src/rpc/json.js";
import type { ReceiptRecord } from "../../src/store/types.js";
import { fuzzSettings } from "../hardening/support.js";

/**
 * The message literals of `encryptedReceiptOf` must be the messages `create()` makes from the same
 * record: equal field for field and on the wire, escrowed or not.
 */

const date = fc.date({
  min: new Date("0001-01-01T00:00:00Z"),
  max: new Date("9999-12-31T23:59:59Z"),
  noInvalidDate: true,
});
const base64 = fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b).toString("base64"));

const record: fc.Arbitrary<ReceiptRecord> = fc
  .record({
    id: fc.string(),
    receiptId: fc.string(),
    merchantId: fc.string(),
    transactionId: fc.string(),
    version: fc.string(),
    merchantTenantId: fc.string(),
    panHash: fc.string(),
    keyBundle: fc.oneof(
      fc.record(
        {
          keyId: fc.string(),
          algorithm: fc.constant("RSA-OAEP-256" as const),
          encryptedAesKey: base64,
          aadBound: fc.constant(true as const),
        },
        { requiredKeys: ["keyId", "algorithm", "encryptedAesKey"] },
      ),
      fc.record({
        keyId: fc.string(),
        algorithm: fc.constant("HPKE-P256-SHA256-A256GCM" as const),
        encryptedAesKey: base64,
        encapsulatedKey: base64,
      }),
    ),
    ciphertext: base64,
    iv: base64,
    authTag: base64,
    createdAt: date,
    isEscrowed: fc.boolean(),
    escrowKeyId: fc.option(fc.string(), { nil: undefined }),
    expiresAt: fc.option(date, { nil: undefined }),
  })
  .map((r) => {
    const { escrowKeyId, expiresAt, ...rest } = r;
    return {
      ...rest,
      ...(escrowKeyId === undefined ? {} : { escrowKeyId }),
      ...(expiresAt === undefined ? {} : { expiresAt }),
    };
  });

function withCreate(r: ReceiptRecord) {
  return create(EncryptedReceiptSchema, {
    version: r.version,
    receiptId: r.receiptId,
    keyId: r.keyBundle.keyId,
    keyBundle: {
      encryptedAesKey: Buffer.from(r.keyBundle.encryptedAesKey, "base64"),
      keyId: r.keyBundle.keyId,
      algorithm: r.keyBundle.algorithm,
      // Stored for bound RSA wraps; every HPKE wrap is bound.
      aadBound: r.keyBundle.aadBound === true || r.keyBundle.algorithm === "HPKE-P256-SHA256-A256GCM",
      ...(r.keyBundle.encapsulatedKey === undefined
        ? {}
        : { encapsulatedKey: Buffer.from(r.keyBundle.encapsulatedKey, "base64") }),
    },
    ciphertext: Buffer.from(r.ciphertext, "base64"),
    iv: Buffer.from(r.iv, "base64"),
    authTag: Buffer.from(r.authTag, "base64"),
    merchantId: r.merchantId,
    transactionId: r.transactionId,
    createdAt: timestampFromDate(r.createdAt),
    isEscrowed: r.isEscrowed,
    ...(r.escrowKeyId === undefined ? {} : { escrowKeyId: r.escrowKeyId }),
    ...(r.expiresAt === undefined ? {} : { expiresAt: timestampFromDate(r.expiresAt) }),
  });
}

describe("encryptedReceiptOf", () => {
  it("makes the message create() makes, field for field and on the wire", () => {
    fc.assert(
      fc.property(record, (r) => {
        const literal = encryptedReceiptOf(r);
        const reference = withCreate(r);
        expect(equals(EncryptedReceiptSchema, literal, reference)).toBe(true);
        expect(Buffer.from(toBinary(EncryptedReceiptSchema, literal))).toEqual(
          Buffer.from(toBinary(EncryptedReceiptSchema, reference)),
        );
        expect(Object.hasOwn(literal, "escrowKeyId")).toBe(r.escrowKeyId !== undefined);
        expect(Object.hasOwn(literal, "expiresAt")).toBe(r.expiresAt !== undefined);
      }),
      { numRuns: 500 },
    );
  });

  it("with the bytes the record's parts and wrapped key were made from, makes the same message and uses those bytes", () => {
    fc.assert(
      fc.property(record, (r) => {
        const parts = {
          ciphertext: new Uint8Array(Buffer.from(r.ciphertext, "base64")),
          iv: new Uint8Array(Buffer.from(r.iv, "base64")),
          authTag: new Uint8Array(Buffer.from(r.authTag, "base64")),
          keyBundle: {
            encryptedAesKey: new Uint8Array(Buffer.from(r.keyBundle.encryptedAesKey, "base64")),
            // As a request carries it: empty when the suite has none.
            encapsulatedKey: new Uint8Array(Buffer.from(r.keyBundle.encapsulatedKey ?? "", "base64")),
          },
        };
        const answer = encryptedReceiptWith(r, parts);
        expect(equals(EncryptedReceiptSchema, answer, withCreate(r))).toBe(true);
        expect(answer.ciphertext).toBe(parts.ciphertext);
        expect(answer.iv).toBe(parts.iv);
        expect(answer.authTag).toBe(parts.authTag);
        expect(answer.keyBundle?.encryptedAesKey).toBe(parts.keyBundle.encryptedAesKey);
        if (r.keyBundle.encapsulatedKey !== undefined && r.keyBundle.encapsulatedKey !== "") {
          expect(answer.keyBundle?.encapsulatedKey).toBe(parts.keyBundle.encapsulatedKey);
        }
      }),
      { numRuns: 300 },
    );
  });

  it("renders as REST JSON with the stored base64 texts, without encoding the bytes again", () => {
    const encode = vi.spyOn(Buffer.prototype, "toString");
    try {
      fc.assert(
        fc.property(record, (r) => {
          const reference = messageToJson(EncryptedReceiptSchema, withCreate(r));
          encode.mockClear();
          const json = messageToJson(EncryptedReceiptSchema, encryptedReceiptOf(r));
          expect(encode).not.toHaveBeenCalled();
          expect(json).toEqual(reference);
          expect(json).toMatchObject({
            ciphertext: r.ciphertext,
            iv: r.iv,
            authTag: r.authTag,
            keyBundle: { encryptedAesKey: r.keyBundle.encryptedAesKey },
          });
        }),
        { numRuns: 300 },
      );
    } finally {
      encode.mockRestore();
    }
  });

  it("renders timestamps as timestampFromDate does, before 1970 too", () => {
    fc.assert(
      fc.property(date, (d) => {
        expect(timestampOf(d)).toEqual(timestampFromDate(d));
      }),
      { numRuns: 2000 },
    );
  });
});

/** A look-up's answer, with none, some or all of the key directory's members. */
const binding = fc.record({ statement: base64, signature: base64, signingKeyId: fc.string() });
const inclusion = fc.array(base64, { maxLength: 4 });
const lookedUp: fc.Arbitrary<LookedUpKey> = fc.record(
  {
    keyId: fc.string(),
    algorithm: fc.constantFrom(...KEY_ALGORITHMS),
    publicKey: base64,
    isEscrowed: fc.boolean(),
    aadBound: fc.boolean(),
    binding,
    opening: base64,
    proof: fc.record({
      leafIndex: fc.bigInt({ min: 0n, max: 2n ** 40n }),
      treeSize: fc.bigInt({ min: 0n, max: 2n ** 40n }),
      inclusion,
      checkpoint: fc.string(),
    }),
    directory: fc.record({ index: fc.bigInt({ min: 0n, max: 2n ** 40n }), inclusion, sha256: fc.string() }),
    checkpoint: fc.string(),
    rootRotation: binding,
  },
  { requiredKeys: ["keyId", "algorithm", "publicKey", "isEscrowed", "aadBound"] },
);

describe("lookupKeyResponseOf", () => {
  it("makes the message create() makes from the answer, with the key directory's members or without", () => {
    let plain = 0;
    fc.assert(
      fc.property(
        fc.oneof(
          lookedUp,
          lookedUp.map(({ keyId, algorithm, publicKey, isEscrowed, aadBound }) => ({
            keyId,
            algorithm,
            publicKey,
            isEscrowed,
            aadBound,
          })),
        ),
        (key) => {
          if (Object.keys(key).length === 5) plain += 1;
          const answer = lookupKeyResponseOf(key);
          const reference = create(LookupKeyResponseSchema, key);
          expect(answer).toStrictEqual(reference);
          expect(equals(LookupKeyResponseSchema, answer, reference)).toBe(true);
          expect(Buffer.from(toBinary(LookupKeyResponseSchema, answer))).toEqual(
            Buffer.from(toBinary(LookupKeyResponseSchema, reference)),
          );
          expect(messageToJson(LookupKeyResponseSchema, answer)).toEqual(
            messageToJson(LookupKeyResponseSchema, reference),
          );
        },
      ),
      { numRuns: 500 },
    );
    // Both ways were taken: answers without members (the literal) and with them.
    expect(plain).toBeGreaterThan(50);
    expect(plain).toBeLessThan(450);
  });
});

describe("bytesFromBase64", () => {
  it("decodes, and gives back a text that is not the bytes' own encoding encoded afresh", () => {
    const bytes = Buffer.from("receipt bytes!");
    const canonical = bytes.toString("base64");
    for (const text of [canonical, ` ${canonical}`, canonical.replace(/=+$/, ""), `${canonical}\n`]) {
      const decoded = bytesFromBase64(text);
      expect(Buffer.from(decoded)).toEqual(bytes);
      expect(base64Of(decoded)).toBe(canonical);
    }
    expect(base64Of(new Uint8Array(bytes))).toBe(canonical);
  });

  it("remembers no text a JSON writer would have to escape, however Node's decoder reads it", () => {
    // Node skips a quote or a backslash, and reads U+D841 by its low byte as "A": each of these has
    // the length of its bytes' encoding, and the JSON text writers put a remembered text in unscanned.
    for (const text of ['QU"D', "QU\\D", "QU\nD", "Q\ud841JD", "QUJDRA=\u0001"]) {
      const decoded = bytesFromBase64(text);
      expect(base64Of(decoded), JSON.stringify(text)).toBe(Buffer.from(decoded).toString("base64"));
    }
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 16 }), (text) => {
        const written = base64Of(bytesFromBase64(text));
        expect(JSON.stringify(written)).toBe(`"${written}"`);
      }),
      fuzzSettings(500),
    );
  });
});
