import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { base64 } from "../../src/kt/bytes.js";
import { leafHash, MemoryTree } from "../../src/kt/merkle.js";
import {
  COSIGNATURE_ED25519,
  checkNoteSignature,
  formatCheckpoint,
  formatNote,
  NOTE_ED25519,
  noteSigner,
  parseNote,
  parseVkey,
  signNoteLine,
} from "../../src/kt/note.js";
import {
  addCheckpoint,
  formatAddCheckpoint,
  readWitnessReply,
  type WitnessConfig,
  type WitnessState,
} from "../../src/kt/witness.js";

/** C2SP signed notes on the specification's own example, and the witness's add-checkpoint rules. */

describe("signed notes", () => {
  it("verifies the example of c2sp.org/signed-note with its vkey, and refuses it altered", () => {
    const key = parseVkey("example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k");
    expect(key).toBeDefined();
    const text =
      "This is an example message.\n\n— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n";
    const note = parseNote(text);
    expect(note && key && checkNoteSignature(note, key).status).toBe("good");
    const altered = parseNote(text.replace("example message", "example massage"));
    expect(altered && key && checkNoteSignature(altered, key).status).toBe("bad");
    expect(
      parseVkey("example.com/foo+530d903b+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"),
    ).toBeUndefined();
  });

  it("refuses malformed notes: no blank line, control characters, a bad signature line", () => {
    expect(parseNote("text\n— a AAAAAAA=\n")).toBeUndefined();
    expect(parseNote("te\u0007xt\n\n— a AAAAAAA=\n")).toBeUndefined();
    expect(parseNote("text\n\n- a AAAAAAA=\n")).toBeUndefined();
    expect(parseNote("text\n\n— a b AAAAAAA=\n")).toBeUndefined();
  });
});

const ORIGIN = "kt.example.com/receipts/kt/v1";

function setup() {
  const log = noteSigner(ORIGIN, NOTE_ED25519, randomBytes(32));
  const witness = noteSigner("witness.bank.example", COSIGNATURE_ED25519, randomBytes(32));
  const config: WitnessConfig = { signers: [witness], logs: { [ORIGIN]: [log.key] } };
  const tree = new MemoryTree(Array.from({ length: 20 }, (_, i) => leafHash(new Uint8Array([i]))));
  const note = (size: number, root = tree.root(size), signer = log) => {
    const text = formatCheckpoint({ origin: ORIGIN, size, root, extensions: [] });
    return formatNote(text, [signNoteLine(signer, text)]);
  };
  return { log, witness, config, tree, note };
}

describe("the witness's add-checkpoint", () => {
  it("cosigns a first checkpoint from 0, then a consistent next one, and its cosignature verifies", () => {
    const { config, tree, note, witness } = setup();
    const first = addCheckpoint(
      config,
      {},
      formatAddCheckpoint({ oldSize: 0, proof: [], checkpoint: note(5) }),
      1_800_000_000,
    );
    expect(first.status).toBe(200);
    const reply = readWitnessReply(first.status, first.contentType, first.body);
    expect(reply.kind).toBe("cosigned");
    const cosigned = parseNote(note(5) + (reply.kind === "cosigned" ? reply.lines.join("") : ""));
    expect(cosigned && checkNoteSignature(cosigned, witness.key)).toEqual({
      status: "good",
      timestamp: 1_800_000_000,
    });
    const next = addCheckpoint(
      config,
      first.state as WitnessState,
      formatAddCheckpoint({ oldSize: 5, proof: tree.consistencyProof(5, 12), checkpoint: note(12) }),
      1_800_000_100,
    );
    expect(next.status).toBe(200);
    expect(next.state?.[ORIGIN]?.size).toBe(12);
  });

  it("refuses two roots for one size, a stale old size (409 with its size), a bad proof, unknown logs and signers", () => {
    const { config, tree, note, log } = setup();
    const state: WitnessState = { [ORIGIN]: { size: 12, root: tree.root(12) } };
    const send = (oldSize: number, proof: Uint8Array[], checkpoint: string) =>
      addCheckpoint(config, state, formatAddCheckpoint({ oldSize, proof, checkpoint }), 1_800_000_000);
    const forked = send(12, [], note(12, new Uint8Array(32).fill(1)));
    expect(forked.status).toBe(422);
    expect(forked.state).toBeUndefined();
    expect(send(12, [], note(12)).status).toBe(200);
    const stale = send(5, tree.consistencyProof(5, 15), note(15));
    expect([stale.status, stale.contentType, stale.body]).toEqual([409, "text/x.tlog.size", "12\n"]);
    expect(readWitnessReply(stale.status, stale.contentType, stale.body)).toEqual({
      kind: "stale",
      size: 12,
    });
    const badProof = tree.consistencyProof(12, 15).map((h, i) => (i === 0 ? new Uint8Array(32) : h));
    expect(send(12, badProof, note(15)).status).toBe(422);
    expect(send(12, tree.consistencyProof(12, 15), note(15)).status).toBe(200);
    expect(send(16, [], note(15)).status).toBe(400);
    const stranger = noteSigner(ORIGIN, NOTE_ED25519, randomBytes(32));
    expect(send(12, tree.consistencyProof(12, 15), note(15, tree.root(15), stranger)).status).toBe(403);
    const otherLog = noteSigner("other.example/log", NOTE_ED25519, randomBytes(32));
    const text = formatCheckpoint({
      origin: "other.example/log",
      size: 1,
      root: tree.root(1),
      extensions: [],
    });
    expect(send(0, [], formatNote(text, [signNoteLine(otherLog, text)])).status).toBe(404);
    // Anyone may post to a witness: an origin named like an Object property is an unknown log too
    // (it once threw, and the server answered 500).
    for (const origin of ["constructor", "__proto__", "toString"]) {
      const signer = noteSigner(origin, NOTE_ED25519, randomBytes(32));
      const named = formatCheckpoint({ origin, size: 1, root: tree.root(1), extensions: [] });
      const posted = send(0, [], formatNote(named, [signNoteLine(signer, named)]));
      expect([posted.status, posted.body], origin).toEqual([404, "unknown log origin\n"]);
    }
    expect(addCheckpoint(config, state, `old 12\nnot base64\n\n${note(15)}`, 0).status).toBe(400);
    expect(send(0, [tree.root(1)], note(15)).status).toBe(409);
    const empty = addCheckpoint(
      config,
      {},
      formatAddCheckpoint({ oldSize: 0, proof: [tree.root(1)], checkpoint: note(15) }),
      1,
    );
    expect(empty.status).toBe(422);
    expect(log.key.name).toBe(ORIGIN);
    expect(base64(tree.root(0)).length).toBe(44);
  });
});
