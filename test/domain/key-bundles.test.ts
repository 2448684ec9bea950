import { generateKeyPairSync } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { KeyBundleSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { RSA_SUITE } from "../../src/crypto/suites.js";
import { checkKeyBundle } from "../../src/domain/key-bundles.js";
import type { SealingKey } from "../../src/domain/routing.js";
import { Violations } from "../../src/errors.js";

/** A cardholder's RSA sealing key of `bits`, under `keyId`. */
function rsaKey(keyId: string, bits: number): SealingKey {
  const { publicKey } = generateKeyPairSync("rsa", { modulusLength: bits });
  const spki = publicKey.export({ type: "spki", format: "der" }).toString("base64");
  return { keyId, algorithm: RSA_SUITE.algorithm, spki, aadBound: false };
}

/** The fields `checkKeyBundle` refuses for a wrapped key of `bytes` to `key` (none: accepted). */
function refusedFields(key: SealingKey, bytes: number): string[] {
  const v = new Violations();
  const bundle = create(KeyBundleSchema, {
    keyId: key.keyId,
    algorithm: key.algorithm,
    encryptedAesKey: new Uint8Array(bytes),
  });
  const stored = checkKeyBundle(v, "keyBundle", bundle, key);
  expect(stored === undefined).toBe(v.list.length > 0);
  return v.list.map((violation) => `${violation.field}: ${violation.description}`);
}

/**
 * The size an RSA wrapped key must have is the recipient key's modulus size, read once per parsed
 * key: keys of different sizes, in turn and under one keyId whose material changes, each get their
 * own size, every time.
 */
describe("checkKeyBundle's RSA wrapped-key size", () => {
  const small = rsaKey("key-2048", 2048);
  const large = rsaKey("key-3072", 3072);

  it("asks each key for its own modulus size, however the calls interleave", () => {
    for (let round = 0; round < 3; round += 1) {
      expect(refusedFields(small, 256)).toEqual([]);
      expect(refusedFields(large, 384)).toEqual([]);
      expect(refusedFields(small, 384)).toEqual(["keyBundle.encryptedAesKey: must be 256 bytes"]);
      expect(refusedFields(large, 256)).toEqual(["keyBundle.encryptedAesKey: must be 384 bytes"]);
    }
  });

  it("reads the size afresh when a keyId's material changes", () => {
    const before = rsaKey("key-rotated", 2048);
    expect(refusedFields(before, 256)).toEqual([]);
    const after = { ...before, spki: large.spki };
    expect(refusedFields(after, 256)).toEqual(["keyBundle.encryptedAesKey: must be 384 bytes"]);
    expect(refusedFields(after, 384)).toEqual([]);
    expect(refusedFields(before, 384)).toEqual(["keyBundle.encryptedAesKey: must be 256 bytes"]);
  });
});
