import { createPrivateKey, generateKeyPairSync, type JsonWebKey } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { CryptoPool } from "../../src/crypto/crypto-pool.js";
import { receiptAad, sealReceipt } from "../../src/crypto/envelope.js";
import { importHpkePublicKey, sealReceiptHpke } from "../../src/crypto/hpke.js";
import { privateKeyIsConsistent } from "../../src/crypto/key-consistency.js";
import { parsePublicKey, privateKeyMatches } from "../../src/crypto/keys.js";
import { AppError } from "../../src/errors.js";
import { ESCROW_FIXTURE } from "../support/fixture-keys.js";

/**
 * A forged private key: the grant's public half (what `privateKeyMatches` compares) beside another
 * key's secret half. It passed the match and then failed to decrypt, a 500; it must be `forbidden`,
 * and a receipt that fails with a consistent key is `integrity_failure`, never a 500.
 */

const aad = receiptAad({ version: "1.0", receiptId: "r", merchantId: "m", transactionId: "t" });
const pool = new CryptoPool({ size: 1, keygenSize: 1, escrowPrivateKeys: [ESCROW_FIXTURE.privateKey] });
afterAll(() => pool.close());

const der = (key: ReturnType<typeof createPrivateKey>) =>
  key.export({ type: "pkcs8", format: "der" }).toString("base64");
const spki = (pair: ReturnType<typeof generateKeyPairSync>) =>
  pair.publicKey.export({ type: "spki", format: "der" }).toString("base64");

/** The victim's public half with the forger's secret half, as one PKCS#8 key. */
function forged(victim: JsonWebKey, forger: JsonWebKey, secret: readonly string[]) {
  const jwk: Record<string, unknown> = { ...victim };
  for (const name of secret) jwk[name] = forger[name as keyof JsonWebKey];
  return createPrivateKey({ key: jwk as JsonWebKey, format: "jwk" });
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(AppError);
  return (error as AppError).code;
}

describe("a forged private key is forbidden, a bad receipt is integrity_failure: never a 500", () => {
  it("RSA: the grant's n and e with another key's primes and CRT values", async () => {
    const [victim, forger] = [
      generateKeyPairSync("rsa", { modulusLength: 2048 }),
      generateKeyPairSync("rsa", { modulusLength: 2048 }),
    ];
    const fake = forged(
      victim.privateKey.export({ format: "jwk" }),
      forger.privateKey.export({ format: "jwk" }),
      ["d", "p", "q", "dp", "dq", "qi"],
    );
    expect(privateKeyMatches(fake, spki(victim))).toBe(true);
    expect(privateKeyIsConsistent(fake)).toBe(false);
    expect(privateKeyIsConsistent(victim.privateKey)).toBe(true);
    const sealed = sealReceipt(Buffer.from("receipt"), aad, parsePublicKey(spki(victim)).key);
    const open = (privateKey: string, tampered = false) =>
      pool.openReceipt({
        privateKey,
        expectedSpki: spki(victim),
        sealed: tampered ? { ...sealed, authTag: Buffer.alloc(16) } : sealed,
        aad,
      });
    expect(await codeOf(open(der(fake)))).toBe("forbidden");
    expect((await open(der(victim.privateKey))).toString()).toBe("receipt");
    expect(await codeOf(open(der(victim.privateKey), true))).toBe("integrity_failure");
    // Only a wrong qi (the CRT recombination): still forged, still forbidden.
    const badQi = forged(
      victim.privateKey.export({ format: "jwk" }),
      forger.privateKey.export({ format: "jwk" }),
      ["qi"],
    );
    expect(await codeOf(open(der(badQi)))).toBe("forbidden");
  });

  it("P-256: the grant's public point with another key's scalar", async () => {
    const [victim, forger] = [
      generateKeyPairSync("ec", { namedCurve: "P-256" }),
      generateKeyPairSync("ec", { namedCurve: "P-256" }),
    ];
    const fake = forged(
      victim.privateKey.export({ format: "jwk" }),
      forger.privateKey.export({ format: "jwk" }),
      ["d"],
    );
    expect(privateKeyMatches(fake, spki(victim))).toBe(true);
    expect(privateKeyIsConsistent(fake)).toBe(false);
    expect(privateKeyIsConsistent(victim.privateKey)).toBe(true);
    const sealed = await sealReceiptHpke(
      Buffer.from("receipt"),
      aad,
      await importHpkePublicKey(spki(victim)),
    );
    const open = (privateKey: string, sealedAad = aad) =>
      pool.openReceipt({ privateKey, expectedSpki: spki(victim), sealed, aad: sealedAad });
    expect(await codeOf(open(der(fake)))).toBe("forbidden");
    expect((await open(der(victim.privateKey))).toString()).toBe("receipt");
    expect(await codeOf(open(der(victim.privateKey), Buffer.from("another receipt")))).toBe(
      "integrity_failure",
    );
  });
});
