import { createPublicKey, hash, verify } from "node:crypto";
import type { Sha256 } from "./hash.js";
import type { SignatureEngine } from "./signatures.js";

/**
 * Node's native SHA-256 and signature equations (OpenSSL), for the server, where the log hashes every
 * leaf and verifies every statement. Node only: the client library never imports this file. The
 * encoding rules stay in `signatures.ts`, which runs them before either engine; a test proves this
 * engine and the pure one agree on every vector.
 */
export const nodeSha256: Sha256 = (data) => {
  const digest = hash("sha256", data, "buffer");
  return new Uint8Array(digest.buffer, digest.byteOffset, digest.byteLength);
};

export const nodeEngine: SignatureEngine = {
  ed25519(key, message, signature) {
    const publicKey = createPublicKey({ key: Buffer.from(key.spki), format: "der", type: "spki" });
    return verify(null, message, publicKey, signature);
  },
  p256(key, message, signature) {
    const publicKey = createPublicKey({ key: Buffer.from(key.spki), format: "der", type: "spki" });
    return verify("sha256", message, { key: publicKey, dsaEncoding: "ieee-p1363" }, signature);
  },
};
