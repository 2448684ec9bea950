import { base64, concat, fromBase64Strict, fromHex, toHex, uintBE } from "./bytes.js";
import { isKeyName, type NoteSigner, noteSigner } from "./note.js";

/**
 * Private keys of C2SP signed notes as text, in the format of Go's `golang.org/x/mod/sumdb/note`
 * (which the C2SP tools share): `PRIVATE+KEY+<name>+<hex key ID>+<base64(type || 32-byte seed)>`.
 * The log's key (`KT_LOG_PRIVATE_KEY`, type 0x01, named after the log's origin) and a witness's key
 * (the command line's `witness`, type 0x04) are written this way; the matching verifier key (vkey) is
 * the same without `PRIVATE+KEY+` and with the public key.
 */

const PREFIX = "PRIVATE+KEY+";

/** A new signer of `type` named `name`, from fresh random bytes (WebCrypto's, in Node and browsers alike). */
export function generateNoteSigner(name: string, type: number): NoteSigner {
  return noteSigner(name, type, globalThis.crypto.getRandomValues(new Uint8Array(32)));
}

/** The private key text of a signer. */
export function formatNoteSkey(signer: NoteSigner): string {
  const { name, type, keyId } = signer.key;
  return `${PREFIX}${name}+${toHex(uintBE(keyId, 4))}+${base64(concat(new Uint8Array([type]), signer.secretKey))}`;
}

/**
 * The signer of a private key text of one of `types`, or why it is not one: the format, the name,
 * the type, and the key ID, which must be the one of the derived public key (so a key pasted into the
 * wrong name or truncated is refused, not used).
 */
export function parseNoteSkey(
  text: string,
  types: readonly number[],
): { ok: true; signer: NoteSigner } | { ok: false; reason: string } {
  const trimmed = text.trim();
  if (!trimmed.startsWith(PREFIX)) return { ok: false, reason: `must start with ${PREFIX}` };
  const parts = trimmed.slice(PREFIX.length).split("+");
  if (parts.length < 3) return { ok: false, reason: "must be PRIVATE+KEY+<name>+<key id>+<key>" };
  const [name, idHex] = parts as [string, string];
  const material = parts.slice(2).join("+");
  const id = fromHex(idHex);
  const bytes = fromBase64Strict(material, 33);
  if (!isKeyName(name)) return { ok: false, reason: "the key name is empty or holds a space or plus" };
  if (id === undefined || id.length !== 4 || bytes === undefined) {
    return { ok: false, reason: "the key ID or key material is malformed" };
  }
  const type = bytes[0] as number;
  if (!types.includes(type)) return { ok: false, reason: `the key type must be ${types.join(" or ")}` };
  const signer = noteSigner(name, type, bytes.slice(1));
  if (toHex(uintBE(signer.key.keyId, 4)) !== idHex) {
    return { ok: false, reason: "the key ID does not match the key" };
  }
  return { ok: true, signer };
}
