import { ed25519 } from "@noble/curves/ed25519.js";
import { base64, bytesEqual, concat, fromBase64Strict, fromHex, toHex, uintBE, utf8 } from "./bytes.js";
import { defaultSha256, type Sha256 } from "./hash.js";
import { emptyRoot, HASH_BYTES } from "./merkle.js";
import {
  nobleEngine,
  parseSigningKey,
  type SignatureEngine,
  type SigningKey,
  verifySignature,
} from "./signatures.js";

/**
 * C2SP signed notes, checkpoints and cosignatures (c2sp.org/signed-note, tlog-checkpoint,
 * tlog-cosignature): the text format every party of the log exchanges.
 *
 * A note is text ending in a newline, a blank line, then lines `— <key name> <base64(key ID ||
 * signature)>`. Key IDs are SHA-256(name || "\n" || type || public key)[:4] with type 0x01 for the
 * log's Ed25519 note signature and 0x04 for a witness's timestamped Ed25519 cosignature, whose signed
 * message is `cosignature/v1\ntime <t>\n` + the checkpoint text and whose signature is
 * `timestamp (u64, big-endian) || Ed25519 signature`. Signatures from unknown keys are ignored; a
 * known key whose signature fails rejects the whole note.
 */

/** Signature types of C2SP signed-note. */
export const NOTE_ED25519 = 0x01;
export const COSIGNATURE_ED25519 = 0x04;

/** The most signatures a note may carry (C2SP: at least 16 must be accepted). */
export const MAX_NOTE_SIGNATURES = 64;

/** The most bytes of a note this code reads. */
export const MAX_NOTE_BYTES = 64 * 1024;

/** The origin suffix of this log: the origin is `<host>/receipts/kt/v1`. */
export const ORIGIN_SUFFIX = "/receipts/kt/v1";

const EM_DASH = "\u2014";

/** One signature line. */
export interface NoteSignature {
  name: string;
  keyId: number;
  /** The bytes after the key ID. */
  signature: Uint8Array;
}

/** A note taken apart: its text (with the final newline) and its signature lines. */
export interface Note {
  text: string;
  signatures: NoteSignature[];
}

/** A verifier key: name, signature type, raw Ed25519 key, and its key ID. */
export interface NoteKey {
  name: string;
  type: number;
  publicKey: Uint8Array;
  keyId: number;
}

/** Whether a key name is valid: non-empty, no spaces, no plus. */
export function isKeyName(name: string): boolean {
  return name.length > 0 && name.length <= 256 && !/[\s+]/u.test(name);
}

/** The key ID of a key: the first 4 bytes (big-endian) of SHA-256(name || "\n" || type || key). */
export function keyIdOf(
  name: string,
  type: number,
  publicKey: Uint8Array,
  sha256: Sha256 = defaultSha256,
): number {
  const digest = sha256(concat(utf8(`${name}\n`), new Uint8Array([type]), publicKey));
  return (
    (((digest[0] as number) << 24) |
      ((digest[1] as number) << 16) |
      ((digest[2] as number) << 8) |
      (digest[3] as number)) >>>
    0
  );
}

/** A verifier key of raw Ed25519 key material. */
export function noteKey(name: string, type: number, publicKey: Uint8Array): NoteKey {
  if (!isKeyName(name)) throw new TypeError("a key name is non-empty, without spaces or plus");
  return { name, type, publicKey: publicKey.slice(), keyId: keyIdOf(name, type, publicKey) };
}

/** The vkey text `<name>+<hex key ID>+<base64(type || key)>`. */
export function formatVkey(key: NoteKey): string {
  return `${key.name}+${toHex(uintBE(key.keyId, 4))}+${base64(concat(new Uint8Array([key.type]), key.publicKey))}`;
}

/** Parses a vkey of an Ed25519 note key (0x01) or cosigner (0x04); undefined when it is not one or its ID is wrong. */
export function parseVkey(text: string): NoteKey | undefined {
  // The key name and the hex ID hold no "+"; the base64 may.
  const first = text.indexOf("+");
  const second = text.indexOf("+", first + 1);
  if (first < 0 || second < 0) return undefined;
  const [name, idHex, material] = [
    text.slice(0, first),
    text.slice(first + 1, second),
    text.slice(second + 1),
  ];
  const id = fromHex(idHex);
  const bytes = fromBase64Strict(material, 33);
  if (!isKeyName(name) || id === undefined || id.length !== 4 || bytes === undefined) return undefined;
  const type = bytes[0] as number;
  if (type !== NOTE_ED25519 && type !== COSIGNATURE_ED25519) return undefined;
  const key = noteKey(name, type, bytes.slice(1));
  return toHex(id) === toHex(uintBE(key.keyId, 4)) ? key : undefined;
}

/** Whether text holds an ASCII control character other than newline (C2SP forbids them in notes). */
function hasControlCharacter(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 && c !== 0x0a) return true;
  }
  return false;
}

/** Takes a note apart; undefined when it is not a well-formed signed note. */
export function parseNote(note: string): Note | undefined {
  if (note.length > MAX_NOTE_BYTES || hasControlCharacter(note)) return undefined;
  const split = note.lastIndexOf("\n\n");
  if (split < 0 || !note.endsWith("\n")) return undefined;
  const text = note.slice(0, split + 1);
  const lines = note.slice(split + 2, -1).split("\n");
  if (lines.length === 0 || lines.length > MAX_NOTE_SIGNATURES) return undefined;
  const signatures: NoteSignature[] = [];
  for (const line of lines) {
    const parsed = parseSignatureLine(line);
    if (parsed === undefined) return undefined;
    signatures.push(parsed);
  }
  return { text, signatures };
}

/** One line `— <name> <base64>` (without its newline). */
export function parseSignatureLine(line: string): NoteSignature | undefined {
  const parts = line.split(" ");
  if (parts.length !== 3 || parts[0] !== EM_DASH) return undefined;
  const [, name, b64] = parts as [string, string, string];
  const bytes = fromBase64Strict(b64);
  if (!isKeyName(name) || bytes === undefined || bytes.length < 5) return undefined;
  const keyId =
    (((bytes[0] as number) << 24) |
      ((bytes[1] as number) << 16) |
      ((bytes[2] as number) << 8) |
      (bytes[3] as number)) >>>
    0;
  return { name, keyId, signature: bytes.slice(4) };
}

/** The signature line text (with its newline). */
export function formatSignatureLine(name: string, keyId: number, signature: Uint8Array): string {
  return `${EM_DASH} ${name} ${base64(concat(uintBE(keyId, 4), signature))}\n`;
}

/** The whole note: text, blank line, signature lines. */
export function formatNote(text: string, signatureLines: string[]): string {
  return `${text}\n${signatureLines.join("")}`;
}

const ED25519_SPKI_PREFIX = fromHex("302a300506032b6570032100") as Uint8Array;

/** Parsed Ed25519 keys by their raw bytes: parsing (a point decompression) is a tenth of a verification. */
const parsedKeys = new Map<string, SigningKey | undefined>();

function ed25519Key(raw: Uint8Array): SigningKey | undefined {
  const id = toHex(raw);
  if (parsedKeys.has(id)) return parsedKeys.get(id);
  const parsed = parseSigningKey(concat(ED25519_SPKI_PREFIX, raw));
  if (parsedKeys.size >= 1024) parsedKeys.clear();
  parsedKeys.set(id, parsed.ok ? parsed.key : undefined);
  return parsed.ok ? parsed.key : undefined;
}

/** The message a timestamped cosignature (0x04) signs. */
export function cosignedMessage(text: string, timestamp: number): Uint8Array {
  return utf8(`cosignature/v1\ntime ${timestamp}\n${text}`);
}

/** A signature of `key` in `note`: the signature lines whose name and key ID are the key's. */
function linesOf(note: Note, key: NoteKey): NoteSignature[] {
  return note.signatures.filter((s) => s.name === key.name && s.keyId === key.keyId);
}

/**
 * Verifies `key`'s signature(s) on a note: "absent" when it has none, "bad" when one fails, else
 * "good" (with, for a cosignature, its timestamp in seconds).
 */
export function checkNoteSignature(
  note: Note,
  key: NoteKey,
  engine: SignatureEngine = nobleEngine,
): { status: "absent" | "bad" } | { status: "good"; timestamp?: number } {
  const lines = linesOf(note, key);
  if (lines.length === 0) return { status: "absent" };
  const signingKey = ed25519Key(key.publicKey);
  if (signingKey === undefined) return { status: "bad" };
  let timestamp: number | undefined;
  for (const line of lines) {
    if (key.type === NOTE_ED25519) {
      if (!verifySignature(signingKey, utf8(note.text), line.signature, engine)) return { status: "bad" };
      continue;
    }
    if (line.signature.length !== 72) return { status: "bad" };
    const t = Number(new DataView(line.signature.buffer, line.signature.byteOffset, 8).getBigUint64(0));
    if (!Number.isSafeInteger(t) || t === 0) return { status: "bad" };
    if (!verifySignature(signingKey, cosignedMessage(note.text, t), line.signature.subarray(8), engine)) {
      return { status: "bad" };
    }
    timestamp = Math.max(timestamp ?? 0, t);
  }
  return timestamp === undefined ? { status: "good" } : { status: "good", timestamp };
}

/** A checkpoint's note text taken apart. */
export interface Checkpoint {
  origin: string;
  size: number;
  root: Uint8Array;
  extensions: string[];
}

/** The note text of a checkpoint. */
export function formatCheckpoint(checkpoint: Checkpoint): string {
  const lines = [
    checkpoint.origin,
    String(checkpoint.size),
    base64(checkpoint.root),
    ...checkpoint.extensions,
  ];
  return `${lines.join("\n")}\n`;
}

/** Parses a checkpoint's note text (C2SP tlog-checkpoint); undefined when it is not one. */
export function parseCheckpoint(text: string): Checkpoint | undefined {
  if (!text.endsWith("\n")) return undefined;
  const lines = text.slice(0, -1).split("\n");
  const [origin, sizeText, rootText, ...extensions] = lines;
  if (origin === undefined || sizeText === undefined || rootText === undefined) return undefined;
  if (!isKeyName(origin) || !/^(0|[1-9][0-9]{0,15})$/.test(sizeText) || extensions.some((l) => l === ""))
    return undefined;
  const size = Number(sizeText);
  const root = fromBase64Strict(rootText, HASH_BYTES);
  if (!Number.isSafeInteger(size) || root === undefined) return undefined;
  if (size === 0 && !bytesEqual(root, emptyRoot())) return undefined;
  return { origin, size, root, extensions };
}

/** A signer for tests, the log and the witness command: an Ed25519 secret key under a key name. */
export interface NoteSigner {
  key: NoteKey;
  secretKey: Uint8Array;
}

/** A signer from a 32-byte Ed25519 secret key (seed). */
export function noteSigner(name: string, type: number, secretKey: Uint8Array): NoteSigner {
  return { key: noteKey(name, type, ed25519.getPublicKey(secretKey)), secretKey: secretKey.slice() };
}

/** The log's signature line (0x01) over a note text. */
export function signNoteLine(signer: NoteSigner, text: string): string {
  return formatSignatureLine(signer.key.name, signer.key.keyId, ed25519.sign(utf8(text), signer.secretKey));
}

/** A witness's cosignature line (0x04) over a checkpoint text at `timestamp` (seconds). */
export function cosignLine(signer: NoteSigner, text: string, timestamp: number): string {
  const signature = ed25519.sign(cosignedMessage(text, timestamp), signer.secretKey);
  const stamp = new Uint8Array(8);
  new DataView(stamp.buffer).setBigUint64(0, BigInt(timestamp));
  return formatSignatureLine(signer.key.name, signer.key.keyId, concat(stamp, signature));
}
