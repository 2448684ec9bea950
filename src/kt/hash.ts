import { sha256 as nobleSha256 } from "@noble/hashes/sha2.js";

/**
 * SHA-256 for the key-transparency code. The default is @noble/hashes (audited, pure JavaScript, the
 * same bytes in Node, browsers and React Native); a server may pass a native one (Node's
 * `crypto.hash`) wherever a function takes a {@link Sha256}, since hashing a million-leaf tree or
 * serving proofs is where the speed of the hash shows. Nothing but speed may differ between the two:
 * a test runs both on the same inputs.
 */
export type Sha256 = (data: Uint8Array) => Uint8Array;

/** The pure-JavaScript SHA-256 every verifier uses unless told otherwise. */
export const defaultSha256: Sha256 = (data) => nobleSha256(data);
