import { hash } from "node:crypto";
import type { Sha256 } from "../../src/kt/hash.js";

/** Node's native SHA-256, for tests that hash a lot (the verifier's rules do not depend on the hash's speed). */
export const nodeSha256: Sha256 = (data) => new Uint8Array(hash("sha256", data, "buffer"));

export function hex(text: string): Uint8Array {
  return new Uint8Array(Buffer.from(text, "hex"));
}

export function b64(text: string): Uint8Array {
  return new Uint8Array(Buffer.from(text, "base64"));
}

/** A copy of `bytes` with bit `bit` (0 = most significant of byte 0) flipped. */
export function flipBit(bytes: Uint8Array, bit: number): Uint8Array {
  const out = bytes.slice();
  out[Math.floor(bit / 8)] = (out[Math.floor(bit / 8)] as number) ^ (0x80 >> (bit % 8));
  return out;
}
