import { readFileSync } from "node:fs";
import type { CryptoPool } from "../../src/crypto/crypto-pool.js";
import type { RsaKeyPair } from "../../src/crypto/keys.js";
import { generateRsaKeyPair } from "../../src/crypto/keys.js";
import { RSA_OAEP_256 } from "../../src/crypto/suites.js";

/**
 * RSA key pairs generated once and committed (`rsa-keys.json`), for tests in which key generation is
 * not what is tested. A 2048-bit key takes 50-500 ms of CPU to find, and the service generates its
 * keys on worker threads at a lower priority (nice 10), so on a busy machine the suite spent most of
 * its time waiting for them. The keys are real and distinct: everything a test does with them
 * (sealing, opening, matching, refusing the wrong one) is what it did with generated ones. Each call
 * hands out a pair no earlier call in this test file got; once they run out, a pair is generated.
 */

interface FixtureKey {
  bits: number;
  /** Base64 DER SubjectPublicKeyInfo. */
  spki: string;
  /** Base64 DER PKCS#8 PrivateKeyInfo. */
  pkcs8: string;
}

const FIXTURES = (
  JSON.parse(readFileSync(new URL("./rsa-keys.json", import.meta.url), "utf8")) as { keys: FixtureKey[] }
).keys;

const RSA_2048 = FIXTURES.filter((k) => k.bits === 2048);

/** The escrow key of test services and domain fixtures (never handed out by {@link fixtureRsaKeyPair}). */
export const ESCROW_FIXTURE: RsaKeyPair = pairOf(RSA_2048[0] as FixtureKey);

/** A 3072-bit pair, for tests of key sizes. */
export const RSA_3072_FIXTURE: RsaKeyPair = pairOf(FIXTURES.find((k) => k.bits === 3072) as FixtureKey);

let next = 1;

/** An RSA-2048 key pair that no earlier call in this file got, as `generateRsaKeyPair` returns one. */
export async function fixtureRsaKeyPair(): Promise<RsaKeyPair> {
  const fixture = RSA_2048[next];
  if (fixture === undefined) return generateRsaKeyPair();
  next += 1;
  return pairOf(fixture);
}

/**
 * Makes `pool` hand out {@link fixtureRsaKeyPair} pairs where it would generate an RSA pair; P-256 pairs
 * are cheap, so those are still generated, and an unknown suite is still refused. Sealing, opening and
 * every other task still run on the pool's workers.
 */
export function useFixtureRsaKeys(pool: CryptoPool): void {
  const generate = pool.generateKeyPair.bind(pool);
  pool.generateKeyPair = async (algorithm = RSA_OAEP_256) =>
    algorithm === RSA_OAEP_256 ? { ...(await fixtureRsaKeyPair()), algorithm } : generate(algorithm);
}

function pairOf(key: FixtureKey): RsaKeyPair {
  return { publicKey: key.spki, privateKey: key.pkcs8 };
}
