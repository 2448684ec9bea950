import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { base64, concat, uintBE } from "../../src/kt/bytes.js";
import { emptyRoot } from "../../src/kt/merkle.js";
import {
  COSIGNATURE_ED25519,
  checkNoteSignature,
  cosignedMessage,
  cosignLine,
  formatCheckpoint,
  formatNote,
  formatSignatureLine,
  formatVkey,
  isKeyName,
  keyIdOf,
  MAX_NOTE_BYTES,
  MAX_NOTE_SIGNATURES,
  NOTE_ED25519,
  noteKey,
  noteSigner,
  parseCheckpoint,
  parseNote,
  parseSignatureLine,
  parseVkey,
  signNoteLine,
} from "../../src/kt/note.js";
import { ED25519_SMALL_ORDER } from "../../src/kt/signatures.js";
import { hex } from "./support.js";

/**
 * C2SP signed notes from the forger's side: a vkey whose ID does not match its key, a note padded
 * past the limits, a signature line that is almost one, a cosignature with a timestamp it was not
 * made for, a checkpoint whose size or root is written two ways. Anchored on the reference vector of
 * Go's golang.org/x/mod/sumdb/note, a second implementation.
 */

const PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
const PETER_TEXT =
  "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
const PETER_NOTE = `${PETER_TEXT}\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n`;

const signer = noteSigner("log.example", NOTE_ED25519, randomBytes(32));
const witness = noteSigner("witness.example", COSIGNATURE_ED25519, randomBytes(32));

describe("vkeys", () => {
  it("reads Go's reference vkey, its key ID the first 4 bytes of SHA-256(name, newline, type, key)", () => {
    const key = parseVkey(PETER_VKEY);
    expect(key).toBeDefined();
    expect(key?.name).toBe("PeterNeumann");
    expect(key?.type).toBe(NOTE_ED25519);
    // Above 2^31: read unsigned.
    expect(key?.keyId).toBe(0xc74f20a3);
    expect(keyIdOf("PeterNeumann", NOTE_ED25519, key?.publicKey as Uint8Array)).toBe(0xc74f20a3);
    expect(formatVkey(key as NonNullable<typeof key>)).toBe(PETER_VKEY);
  });

  it("refuses a vkey whose key ID is not its key's, or whose type is neither 0x01 nor 0x04", () => {
    expect(parseVkey(PETER_VKEY.replace("c74f20a3", "c74f20a4"))).toBeUndefined();
    expect(parseVkey(PETER_VKEY.replace("c74f20a3", "c74f20"))).toBeUndefined();
    expect(parseVkey(PETER_VKEY.replace("c74f20a3", "c74f20a3a3"))).toBeUndefined();
    // A key ID that is not hex is refused, not a crash.
    expect(parseVkey(PETER_VKEY.replace("c74f20a3", "c74f20ag"))).toBeUndefined();
    const material = (type: number) => base64(concat(new Uint8Array([type]), signer.key.publicKey));
    // Another type with its own correct key ID: still not a key this code verifies with.
    for (const type of [0x02, 0x00, 0x05]) {
      const id = keyIdOf("k", type, signer.key.publicKey);
      expect(parseVkey(`k+${hex8(id)}+${material(type)}`), String(type)).toBeUndefined();
    }
    const cosigner = parseVkey(formatVkey(witness.key));
    expect(cosigner).toEqual(witness.key);
    expect(cosigner?.type).toBe(COSIGNATURE_ED25519);
  });

  it("refuses a vkey without its three parts, with a bad name, or key material of the wrong length", () => {
    expect(parseVkey("PeterNeumann")).toBeUndefined();
    expect(parseVkey("PeterNeumann+c74f20a3")).toBeUndefined();
    expect(parseVkey(`+${PETER_VKEY.slice("PeterNeumann+".length)}`)).toBeUndefined();
    expect(parseVkey(`${PETER_VKEY}AA`)).toBeUndefined();
    expect(parseVkey(PETER_VKEY.slice(0, -4))).toBeUndefined();
    const spaced = noteKeyText("a b");
    expect(parseVkey(spaced)).toBeUndefined();
  });

  it("holds names to C2SP: 1 to 256 characters, no whitespace, no plus", () => {
    expect(isKeyName("a")).toBe(true);
    expect(isKeyName("a".repeat(256))).toBe(true);
    expect(isKeyName("a".repeat(257))).toBe(false);
    expect(isKeyName("")).toBe(false);
    for (const bad of ["a b", "a+b", "a\tb", "a\nb", "a\u00a0b"]) expect(isKeyName(bad), bad).toBe(false);
    expect(() => noteKey("a+b", NOTE_ED25519, signer.key.publicKey)).toThrow(
      new TypeError("a key name is non-empty, without spaces or plus"),
    );
    // The key keeps its own copy of the bytes: changing the caller's array changes nothing.
    const bytes = signer.key.publicKey.slice();
    const key = noteKey("copy", NOTE_ED25519, bytes);
    bytes.fill(0);
    expect(key.publicKey).toEqual(signer.key.publicKey);
  });
});

describe("notes", () => {
  it("verifies Go's reference note, and refuses it altered", () => {
    const key = parseVkey(PETER_VKEY) as NonNullable<ReturnType<typeof parseVkey>>;
    const note = parseNote(PETER_NOTE);
    expect(note?.text).toBe(PETER_TEXT);
    expect(note?.signatures).toHaveLength(1);
    // A note signature has no time: no timestamp field at all.
    expect(note && checkNoteSignature(note, key)).toStrictEqual({ status: "good" });
    const altered = parseNote(PETER_NOTE.replace("answer", "Answer"));
    expect(altered && checkNoteSignature(altered, key)).toEqual({ status: "bad" });
  });

  it("takes a note apart at its last blank line, and refuses one that does not end in a newline", () => {
    const text = "line one\n\nline three\n";
    const note = formatNote(text, [signNoteLine(signer, text)]);
    expect(parseNote(note)?.text).toBe(text);
    expect(parseNote(note.slice(0, -1))).toBeUndefined();
    expect(parseNote(`${text}\n`)).toBeUndefined();
    expect(parseNote(`${note}\n`)).toBeUndefined();
  });

  it("refuses control characters other than newline, anywhere", () => {
    const text = "checkpoint\n";
    const note = formatNote(text, [signNoteLine(signer, text)]);
    for (const c of ["\t", "\r", "\u0000", "\u001f"]) {
      expect(parseNote(c + note), JSON.stringify(c)).toBeUndefined();
    }
    // 0x20 and above are text.
    expect(parseNote(` ${note}`)).toBeDefined();
  });

  it("reads at most 64 signature lines and 64 KiB", () => {
    const text = "checkpoint\n";
    const line = signNoteLine(signer, text);
    expect(parseNote(formatNote(text, Array(MAX_NOTE_SIGNATURES).fill(line)))?.signatures).toHaveLength(64);
    expect(parseNote(formatNote(text, Array(MAX_NOTE_SIGNATURES + 1).fill(line)))).toBeUndefined();
    const padded = (bytes: number) => {
      const note = formatNote("x\n", [line]);
      return formatNote(`${"x".repeat(bytes - note.length + 1)}\n`, [line]);
    };
    expect(padded(MAX_NOTE_BYTES).length).toBe(MAX_NOTE_BYTES);
    expect(parseNote(padded(MAX_NOTE_BYTES))).toBeDefined();
    expect(parseNote(padded(MAX_NOTE_BYTES + 1))).toBeUndefined();
  });

  it("refuses a signature line that is almost one", () => {
    const good = formatSignatureLine("k", 0xc74f20a3, new Uint8Array([1, 2, 3])).slice(0, -1);
    expect(parseSignatureLine(good)).toEqual({
      name: "k",
      keyId: 0xc74f20a3,
      signature: new Uint8Array([1, 2, 3]),
    });
    expect(parseSignatureLine(good.replace("\u2014", "-"))).toBeUndefined();
    expect(parseSignatureLine(`${good} x`)).toBeUndefined();
    expect(parseSignatureLine(good.replace(" k ", "  "))).toBeUndefined();
    expect(parseSignatureLine(good.replace(" k ", " k+ "))).toBeUndefined();
    expect(parseSignatureLine(`${good.slice(0, -1)}!`)).toBeUndefined();
    // A key ID and one byte of signature at least.
    expect(parseSignatureLine(`\u2014 k ${base64(uintBE(1, 4))}`)).toBeUndefined();
    expect(parseSignatureLine(`\u2014 k ${base64(concat(uintBE(1, 4), new Uint8Array(1)))}`)).toMatchObject({
      keyId: 1,
    });
  });
});

describe("signatures on a note", () => {
  const text = "checkpoint text\n";

  it("is absent without a line of the key's name and ID, bad when any line of the key fails", () => {
    const good = signNoteLine(signer, text);
    const other = noteSigner("log.example", NOTE_ED25519, randomBytes(32));
    const parse = (...lines: string[]) =>
      parseNote(formatNote(text, lines)) as NonNullable<ReturnType<typeof parseNote>>;
    expect(checkNoteSignature(parse(good), signer.key)).toEqual({ status: "good" });
    // Same name, another key: its line is not the key's.
    expect(checkNoteSignature(parse(signNoteLine(other, text)), signer.key)).toEqual({ status: "absent" });
    // Right key ID under another name.
    const renamed = good.replace("log.example", "log2.example");
    expect(checkNoteSignature(parse(renamed), signer.key)).toEqual({ status: "absent" });
    // A second line of the key that fails spoils the good one, in either order.
    const bad = signNoteLine(signer, "another text\n");
    expect(checkNoteSignature(parse(good, bad), signer.key)).toEqual({ status: "bad" });
    expect(checkNoteSignature(parse(bad, good), signer.key)).toEqual({ status: "bad" });
  });

  it("refuses every signature of a key that is not a usable Ed25519 point", () => {
    const smallOrder = noteKey("weak", NOTE_ED25519, hex(ED25519_SMALL_ORDER[1] as string));
    const line = formatSignatureLine("weak", smallOrder.keyId, new Uint8Array(64));
    const note = parseNote(formatNote(text, [line])) as NonNullable<ReturnType<typeof parseNote>>;
    expect(checkNoteSignature(note, smallOrder)).toEqual({ status: "bad" });
  });

  it("reads a cosignature's time, and refuses one whose time is not the one signed, zero, or too large", () => {
    const t = 1_800_000_000;
    const parse = (...lines: string[]) =>
      parseNote(formatNote(text, lines)) as NonNullable<ReturnType<typeof parseNote>>;
    expect(checkNoteSignature(parse(cosignLine(witness, text, t)), witness.key)).toEqual({
      status: "good",
      timestamp: t,
    });
    // Two good cosignatures of one witness: the newer time.
    expect(
      checkNoteSignature(parse(cosignLine(witness, text, t), cosignLine(witness, text, t + 7)), witness.key),
    ).toEqual({ status: "good", timestamp: t + 7 });
    expect(
      checkNoteSignature(parse(cosignLine(witness, text, t + 7), cosignLine(witness, text, t)), witness.key),
    ).toEqual({ status: "good", timestamp: t + 7 });

    const line = (stamp: Uint8Array, signature: Uint8Array) =>
      formatSignatureLine(witness.key.name, witness.key.keyId, concat(stamp, signature));
    const signature = parseSignatureLine(cosignLine(witness, text, t).slice(0, -1))?.signature as Uint8Array;
    const sig = signature.subarray(8);
    // The signature of time t, stamped t + 1: the stamp is part of what is signed.
    expect(checkNoteSignature(parse(line(stamp64(BigInt(t + 1)), sig)), witness.key)).toEqual({
      status: "bad",
    });
    expect(checkNoteSignature(parse(line(stamp64(0n), sig)), witness.key)).toEqual({ status: "bad" });
    // Times signed as such, but 0 or past 2^53 - 1: refused all the same.
    expect(checkNoteSignature(parse(cosignLine(witness, text, 0)), witness.key)).toEqual({ status: "bad" });
    expect(checkNoteSignature(parse(cosignLine(witness, text, 2 ** 53)), witness.key)).toEqual({
      status: "bad",
    });
    expect(checkNoteSignature(parse(line(stamp64(2n ** 53n), sig)), witness.key)).toEqual({ status: "bad" });
    // 72 bytes exactly: one byte short or long is refused.
    expect(checkNoteSignature(parse(line(stamp64(BigInt(t)), sig.subarray(1))), witness.key)).toEqual({
      status: "bad",
    });
    expect(
      checkNoteSignature(parse(line(stamp64(BigInt(t)), concat(sig, new Uint8Array(1)))), witness.key),
    ).toEqual({ status: "bad" });
    // What a cosignature signs (tlog-cosignature): the time, then the checkpoint text.
    expect(cosignedMessage(text, t)).toEqual(new TextEncoder().encode(`cosignature/v1\ntime ${t}\n${text}`));
  });
});

describe("signers", () => {
  it("keep their own copy of the secret: the caller wiping its array changes no signature", () => {
    const secret = new Uint8Array(randomBytes(32));
    const own = noteSigner("log.example", NOTE_ED25519, secret);
    secret.fill(0);
    const text = "checkpoint\n";
    const note = parseNote(formatNote(text, [signNoteLine(own, text)])) as NonNullable<
      ReturnType<typeof parseNote>
    >;
    expect(checkNoteSignature(note, own.key)).toEqual({ status: "good" });
  });
});

describe("checkpoints", () => {
  const root = new Uint8Array(32).fill(9);
  const body = (size: string, rootText = base64(root), extra = "") =>
    `origin.example\n${size}\n${rootText}\n${extra}`;

  it("round-trips origin, size, root and extension lines", () => {
    const checkpoint = { origin: "origin.example", size: 12, root, extensions: ["ext one", "ext two"] };
    const text = formatCheckpoint(checkpoint);
    expect(text).toBe(`origin.example\n12\n${base64(root)}\next one\next two\n`);
    expect(parseCheckpoint(text)).toEqual(checkpoint);
  });

  it("writes a size one way only: no sign, no leading zero, no exponent, at most 2^53 - 1", () => {
    expect(parseCheckpoint(body("1"))?.size).toBe(1);
    expect(parseCheckpoint(body("9007199254740991"))?.size).toBe(2 ** 53 - 1);
    for (const size of ["01", "+1", "-1", "1e3", "0x10", " 1", "", "9007199254740992", "90071992547409910"]) {
      expect(parseCheckpoint(body(size)), size).toBeUndefined();
    }
  });

  it("refuses a root that is not 32 bytes of strict base64, and an empty tree with another root", () => {
    expect(parseCheckpoint(body("3", base64(new Uint8Array(31))))).toBeUndefined();
    expect(parseCheckpoint(body("3", base64(new Uint8Array(33))))).toBeUndefined();
    expect(parseCheckpoint(body("3", base64(root).replace("=", "")))).toBeUndefined();
    expect(parseCheckpoint(body("0"))).toBeUndefined();
    expect(parseCheckpoint(body("0", base64(emptyRoot())))).toMatchObject({ size: 0 });
  });

  it("refuses a missing line, a bad origin, an empty extension line, or no final newline", () => {
    expect(parseCheckpoint("origin.example\n3\n")).toBeUndefined();
    expect(parseCheckpoint("origin.example\n")).toBeUndefined();
    expect(parseCheckpoint(body("3").replace("origin.example", "origin example"))).toBeUndefined();
    expect(parseCheckpoint(body("3", base64(root), "ext\n\n"))).toBeUndefined();
    expect(parseCheckpoint(body("3", base64(root), "ext\n"))).toMatchObject({ extensions: ["ext"] });
    expect(parseCheckpoint(body("3").slice(0, -1))).toBeUndefined();
    expect(parseCheckpoint(body("3", base64(root), "ext"))).toBeUndefined();
  });
});

function hex8(id: number): string {
  return id.toString(16).padStart(8, "0");
}

/** A vkey text of the signer's key under `name`, with the ID computed for that name. */
function noteKeyText(name: string): string {
  const id = keyIdOf(name, NOTE_ED25519, signer.key.publicKey);
  return `${name}+${hex8(id)}+${base64(concat(new Uint8Array([NOTE_ED25519]), signer.key.publicKey))}`;
}

function stamp64(value: bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, value);
  return out;
}
