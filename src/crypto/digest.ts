import { hash } from "node:crypto";

/**
 * SHA-256 of `data` (a string is hashed as its UTF-8 bytes), lower-case hex: how API keys, grant
 * tokens and payment client secrets are stored and looked up. One native call (`crypto.hash`); a
 * `createHash` object per call cost three to four times as much, and every request hashes its API key.
 */
export function sha256Hex(data: string | Uint8Array): string {
  return hash("sha256", data, "hex");
}
