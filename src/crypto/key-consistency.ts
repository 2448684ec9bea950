import { createECDH, type KeyObject } from "node:crypto";
import { suiteCurves } from "./suites.js";

/**
 * Whether a private key's secret half belongs to the public half it carries. A PKCS#8 key carries its
 * public key (RSA: n and e; EC: the public point), and that is what `privateKeyMatches` compares with
 * the grant's key; the secret half (RSA: p, q and the CRT exponents; EC: the scalar d) is not looked at
 * by that comparison. A forged key, the grant's public half beside another key's secret half, passed
 * it and then failed to decrypt: a 500 that looked like a corrupt receipt. With this check it is what
 * it is, a key that does not match (`forbidden`), and a receipt that fails with a consistent key is the
 * receipt's fault.
 *
 * - RSA: n = p q, e dp = 1 mod (p - 1), e dq = 1 mod (q - 1), qi q = 1 mod p: exactly what
 *   OpenSSL's CRT decryption uses, so a key that passes decrypts as the public key encrypts. (d itself
 *   is not used by CRT decryption; a wrong d with right CRT values still decrypts correctly.) A few
 *   BigInt products of 1024-bit numbers: tens of microseconds.
 * - EC (a suite's curve, `suites.ts`): d G equals the carried public point (one scalar multiplication
 *   by OpenSSL).
 *
 * Keys of other types are not the business of this check and pass.
 */
export function privateKeyIsConsistent(key: KeyObject): boolean {
  try {
    if (key.asymmetricKeyType === "rsa") return rsaIsConsistent(key);
    if (key.asymmetricKeyType === "ec") return ecIsConsistent(key);
    return true;
  } catch {
    return false;
  }
}

function rsaIsConsistent(key: KeyObject): boolean {
  const jwk = key.export({ format: "jwk" });
  const [n, e, p, q, dp, dq, qi] = [jwk.n, jwk.e, jwk.p, jwk.q, jwk.dp, jwk.dq, jwk.qi].map(bigIntOf);
  if (
    n === undefined ||
    e === undefined ||
    p === undefined ||
    q === undefined ||
    dp === undefined ||
    dq === undefined ||
    qi === undefined ||
    p < 2n ||
    q < 2n
  ) {
    return false;
  }
  return p * q === n && (e * dp) % (p - 1n) === 1n && (e * dq) % (q - 1n) === 1n && (qi * q) % p === 1n;
}

function ecIsConsistent(key: KeyObject): boolean {
  const jwk = key.export({ format: "jwk" });
  const curve = suiteCurves().find((c) => c.name === jwk.crv);
  if (curve === undefined || jwk.d === undefined || jwk.x === undefined || jwk.y === undefined) return false;
  const ecdh = createECDH(curve.nodeName);
  ecdh.setPrivateKey(Buffer.from(jwk.d, "base64url"));
  const derived = ecdh.getPublicKey();
  const carried = Buffer.concat([
    Buffer.from([0x04]),
    Buffer.from(jwk.x, "base64url"),
    Buffer.from(jwk.y, "base64url"),
  ]);
  return derived.equals(carried);
}

/** A base64url JWK integer as a BigInt, or undefined when absent or empty. */
function bigIntOf(value: string | undefined): bigint | undefined {
  if (value === undefined || value === "") return undefined;
  const hex = Buffer.from(value, "base64url").toString("hex");
  return hex === "" ? undefined : BigInt(`0x${hex}`);
}
