import {
  AeadId,
  type AeadInterface,
  Aes128Gcm,
  Aes256Gcm,
  CipherSuite,
  DhkemP256HkdfSha256,
  DhkemP384HkdfSha384,
  DhkemP521HkdfSha512,
  HkdfSha256,
  HkdfSha384,
  HkdfSha512,
  KdfId,
  type KdfInterface,
  KemId,
  type KemInterface,
} from "@hpke/core";
import type { KeySuite } from "./suites.js";

/**
 * The `@hpke/core` cipher suite of an HPKE key suite, from the RFC 9180 identifiers its registry object
 * names (`suites.ts`, `hpke`). Every NIST-curve KEM, KDF and AES-GCM AEAD the library offers is here,
 * so a key suite on another of them is a registry object, not a change here. No `node:` module: the
 * service (`hpke.ts`) and the client library (`src/client/p256.ts`) share it. Suites are stateless and
 * made once per suite.
 */

const KEMS: Readonly<Record<number, () => KemInterface>> = {
  [KemId.DhkemP256HkdfSha256]: () => new DhkemP256HkdfSha256(),
  [KemId.DhkemP384HkdfSha384]: () => new DhkemP384HkdfSha384(),
  [KemId.DhkemP521HkdfSha512]: () => new DhkemP521HkdfSha512(),
};
const KDFS: Readonly<Record<number, () => KdfInterface>> = {
  [KdfId.HkdfSha256]: () => new HkdfSha256(),
  [KdfId.HkdfSha384]: () => new HkdfSha384(),
  [KdfId.HkdfSha512]: () => new HkdfSha512(),
};
const AEADS: Readonly<Record<number, () => AeadInterface>> = {
  [AeadId.Aes128Gcm]: () => new Aes128Gcm(),
  [AeadId.Aes256Gcm]: () => new Aes256Gcm(),
};

const made = new Map<string, CipherSuite>();

function pick<T>(table: Record<number, () => T>, id: number, what: string, suite: KeySuite): T {
  const make = Object.hasOwn(table, id) ? table[id] : undefined;
  if (make === undefined) throw new Error(`${suite.algorithm}: no HPKE ${what} 0x${id.toString(16)} here`);
  return make();
}

/** The cipher suite of an HPKE key suite; throws for a suite that is not HPKE. */
export function hpkeCipherSuite(suite: KeySuite): CipherSuite {
  let cipher = made.get(suite.algorithm);
  if (cipher === undefined) {
    const ids = suite.hpke;
    if (ids === undefined) throw new Error(`${suite.algorithm} is not an HPKE suite`);
    cipher = new CipherSuite({
      kem: pick(KEMS, ids.kem, "KEM", suite),
      kdf: pick(KDFS, ids.kdf, "KDF", suite),
      aead: pick(AEADS, ids.aead, "AEAD", suite),
    });
    made.set(suite.algorithm, cipher);
  }
  return cipher;
}

/** WebCrypto's ECDH parameters for the keys of an HPKE key suite. */
export function ecdhParams(suite: KeySuite): { name: "ECDH"; namedCurve: string } {
  if (suite.curve === undefined) throw new Error(`${suite.algorithm} has no curve`);
  return { name: "ECDH", namedCurve: suite.curve.name };
}
