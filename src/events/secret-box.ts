import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";

/**
 * Webhook secrets and signing private keys at rest. The service must use them to sign, so it cannot
 * keep only a hash (as it does for API keys): they are sealed with AES-256-GCM under a key from
 * configuration (`WEBHOOK_SECRET_KEY`), which never reaches the database. The additional data binds a
 * sealed value to its endpoint and its kind, so a value copied to another endpoint or field does not
 * open. Format: `v1.<key id>.<base64url of iv | ciphertext | tag>`, the key id being the first 8 hex
 * digits of the key's SHA-256: several keys may be configured (newest first seals), so the sealing key
 * can be rotated without losing what older keys sealed.
 */
export class SecretBox {
  private readonly keys: { id: string; key: Buffer }[];

  /** `keys`: 32-byte keys, newest first. */
  constructor(keys: readonly Buffer[]) {
    if (keys.length === 0 || keys.some((k) => k.length !== 32)) {
      throw new RangeError("SecretBox needs one or more 32-byte keys.");
    }
    this.keys = keys.map((key) => ({ id: createHash("sha256").update(key).digest("hex").slice(0, 8), key }));
  }

  /** Seals `plaintext` for `context` (e.g. `whsec:we_abc`). */
  seal(plaintext: string, context: string): string {
    const { id, key } = this.keys[0] as { id: string; key: Buffer };
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", key, iv);
    cipher.setAAD(Buffer.from(`receipts.v1 webhook ${context}`, "utf8"));
    const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
    return `v1.${id}.${Buffer.concat([iv, body, cipher.getAuthTag()]).toString("base64url")}`;
  }

  /**
   * Opens a value sealed for `context`. Throws (without the value in the message) when it was sealed
   * by a key no longer configured, for another context, or changed since.
   */
  open(sealed: string, context: string): string {
    const [version, id, data] = sealed.split(".");
    const entry = this.keys.find((k) => k.id === id);
    if (version !== "v1" || entry === undefined || data === undefined) {
      throw new Error("A sealed webhook secret was made with a key that is not configured.");
    }
    const bytes = Buffer.from(data, "base64url");
    if (bytes.length < 12 + 16) throw new Error("A sealed webhook secret is damaged.");
    const decipher = createDecipheriv("aes-256-gcm", entry.key, bytes.subarray(0, 12));
    decipher.setAAD(Buffer.from(`receipts.v1 webhook ${context}`, "utf8"));
    decipher.setAuthTag(bytes.subarray(bytes.length - 16));
    try {
      return Buffer.concat([
        decipher.update(bytes.subarray(12, bytes.length - 16)),
        decipher.final(),
      ]).toString("utf8");
    } catch {
      throw new Error("A sealed webhook secret does not open: damaged, or sealed for another endpoint.");
    }
  }
}
