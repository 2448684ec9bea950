import { createCipheriv, createDecipheriv, createHmac, hkdfSync } from "node:crypto";

/**
 * `escrowRef` of an `escrow.pending` event: a reference to the card that only the tenant it was made
 * for can use, in place of the hashed PAN, to list the card's pending escrow. An issuer that owns a BIN
 * learns of a receipt escrowed for one of its cards before it knows which card; the event must not carry
 * the hashed PAN (card data), nor the service's keyed hash of it (the same for every tenant,
 * so a join key across tenants). The reference is the keyed hash encrypted with AES-256-GCM under a key
 * derived from the pepper, the tenant as additional data, and a nonce derived from the tenant and the
 * card (a synthetic IV): the same card gives the same reference to the same tenant, and nothing a
 * tenant can read or compare to what another tenant gets. Format `esr_` + base64url(iv | ct | tag).
 */

const PREFIX = "esr_";

/** The encryption and nonce keys of escrow references, derived from the pepper. */
export class EscrowRefs {
  private readonly encKey: Buffer;
  private readonly ivKey: Buffer;

  constructor(pepper: string) {
    const keys = Buffer.from(hkdfSync("sha256", pepper, Buffer.alloc(0), "receipts.v1 escrow ref", 64));
    this.encKey = keys.subarray(0, 32);
    this.ivKey = keys.subarray(32);
  }

  /** The reference of the card `panHash` (the stored keyed hash, 64 hex) for `tenantId`. */
  make(tenantId: string, panHash: string): string {
    const iv = createHmac("sha256", this.ivKey)
      .update(`${tenantId}\u0000${panHash}`)
      .digest()
      .subarray(0, 12);
    const cipher = createCipheriv("aes-256-gcm", this.encKey, iv);
    cipher.setAAD(Buffer.from(tenantId, "utf8"));
    const body = Buffer.concat([cipher.update(Buffer.from(panHash, "hex")), cipher.final()]);
    return `${PREFIX}${Buffer.concat([iv, body, cipher.getAuthTag()]).toString("base64url")}`;
  }

  /** The card of a reference made for `tenantId`; undefined for anything else (another tenant's too). */
  open(tenantId: string, ref: string): string | undefined {
    if (!ref.startsWith(PREFIX) || ref.length > 200) return undefined;
    const bytes = Buffer.from(ref.slice(PREFIX.length), "base64url");
    if (bytes.length !== 12 + 32 + 16) return undefined;
    const decipher = createDecipheriv("aes-256-gcm", this.encKey, bytes.subarray(0, 12));
    decipher.setAAD(Buffer.from(tenantId, "utf8"));
    decipher.setAuthTag(bytes.subarray(44));
    try {
      return Buffer.concat([decipher.update(bytes.subarray(12, 44)), decipher.final()]).toString("hex");
    } catch {
      return undefined;
    }
  }
}
