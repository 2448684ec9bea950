import { createCipheriv, createDecipheriv, createHmac } from "node:crypto";
import { secureRandomBytes } from "../../crypto/random.js";

/**
 * The card reference of a pending statement, sealed for the sequencer. The sequencer must rebuild a
 * card statement's exact signed bytes (its `cardRef` included) to check the signature and build the
 * leaf, but the service never stores a card reference in the clear: the pending record carries it
 * sealed with AES-256-GCM under a key derived from the pepper (which every instance shares), bound
 * to the record's id, and it is deleted with the record once the leaf is appended. Whoever reads the
 * store without the pepper learns nothing from it; a sealed reference copied into another record
 * does not open there.
 */
export class CardRefSeal {
  private readonly key: Buffer;

  constructor(pepper: string) {
    this.key = createHmac("sha256", pepper).update("receipts.v1 kt pending card-ref").digest();
  }

  /** Base64 of IV (12) || ciphertext || tag (16), bound to `pendingId`. */
  seal(pendingId: string, ref: string): string {
    const iv = secureRandomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.key, iv);
    cipher.setAAD(Buffer.from(pendingId, "utf8"));
    const body = Buffer.concat([cipher.update(ref, "utf8"), cipher.final()]);
    return Buffer.concat([iv, body, cipher.getAuthTag()]).toString("base64");
  }

  /** The card reference, or undefined when `sealed` was not sealed for `pendingId` under this key. */
  open(pendingId: string, sealed: string): string | undefined {
    const bytes = Buffer.from(sealed, "base64");
    if (bytes.length < 12 + 16 + 1) return undefined;
    try {
      const decipher = createDecipheriv("aes-256-gcm", this.key, bytes.subarray(0, 12));
      decipher.setAAD(Buffer.from(pendingId, "utf8"));
      decipher.setAuthTag(bytes.subarray(bytes.length - 16));
      return Buffer.concat([
        decipher.update(bytes.subarray(12, bytes.length - 16)),
        decipher.final(),
      ]).toString("utf8");
    } catch {
      return undefined;
    }
  }
}
