import { base64, bytesEqual, fromBase64Strict } from "./bytes.js";
import { defaultSha256, type Sha256 } from "./hash.js";
import { HASH_BYTES, verifyConsistency } from "./merkle.js";
import {
  type Checkpoint,
  checkNoteSignature,
  cosignLine,
  type NoteKey,
  type NoteSigner,
  parseCheckpoint,
  parseNote,
  parseSignatureLine,
} from "./note.js";
import { nobleEngine, type SignatureEngine } from "./signatures.js";

/**
 * The C2SP tlog-witness `add-checkpoint` protocol as pure functions: the witness's side (a request
 * and the witness's state in, a response and the next state out) and the log's side (the request
 * body, the reading of the response). The command line's witness server and the log's witness client
 * are thin wrappers: the server must store the next state atomically with the check (compare and
 * swap on the old state), as the protocol requires, before it answers.
 */

/** The most consistency proof lines a request may carry (C2SP: 63). */
export const MAX_PROOF_LINES = 63;

/** What a witness remembers per log: the latest checkpoint it cosigned. */
export interface WitnessLogState {
  size: number;
  root: Uint8Array;
}

/** A witness's state: per origin, the latest cosigned checkpoint. */
export type WitnessState = Readonly<Record<string, WitnessLogState>>;

/** A witness: its signer(s) and, per origin it follows, the log's trusted keys. */
export interface WitnessConfig {
  signers: NoteSigner[];
  logs: Readonly<Record<string, NoteKey[]>>;
}

/** An HTTP answer of the witness. */
export interface WitnessResponse {
  status: 200 | 400 | 403 | 404 | 409 | 422;
  contentType: string;
  body: string;
  /** The state to store (only with 200). */
  state?: WitnessState;
}

/** A parsed add-checkpoint request. */
export interface AddCheckpointRequest {
  oldSize: number;
  proof: Uint8Array[];
  /** The signed checkpoint note. */
  checkpoint: string;
}

/** The request body the log sends. */
export function formatAddCheckpoint(request: AddCheckpointRequest): string {
  return `old ${request.oldSize}\n${request.proof.map((h) => `${base64(h)}\n`).join("")}\n${request.checkpoint}`;
}

/** Parses a request body; undefined when it is malformed (400). */
export function parseAddCheckpoint(body: string): AddCheckpointRequest | undefined {
  const blank = body.indexOf("\n\n");
  if (blank < 0) return undefined;
  const [oldLine, ...proofLines] = body.slice(0, blank).split("\n");
  const old = /^old (0|[1-9][0-9]{0,15})$/.exec(oldLine ?? "");
  if (old === null || proofLines.length > MAX_PROOF_LINES) return undefined;
  const proof = proofLines.map((line) => fromBase64Strict(line, HASH_BYTES));
  if (proof.some((h) => h === undefined)) return undefined;
  const oldSize = Number(old[1]);
  if (!Number.isSafeInteger(oldSize)) return undefined;
  return { oldSize, proof: proof as Uint8Array[], checkpoint: body.slice(blank + 2) };
}

function answer(
  status: WitnessResponse["status"],
  body: string,
  contentType = "text/plain; charset=utf-8",
): WitnessResponse {
  return { status, contentType, body };
}

/** The log's checkpoint signature check: 403 unless a trusted key signed and none failed. */
function logSigned(checkpointNote: string, keys: NoteKey[], engine: SignatureEngine): "good" | "bad" {
  const note = parseNote(checkpointNote);
  if (note === undefined) return "bad";
  let good = false;
  for (const key of keys) {
    const check = checkNoteSignature(note, key, engine);
    if (check.status === "bad") return "bad";
    if (check.status === "good") good = true;
  }
  return good ? "good" : "bad";
}

/**
 * The witness's answer to an `add-checkpoint` body at `now` (seconds): 400 malformed or old size above
 * the checkpoint's; 404 unknown origin; 403 not signed by the log (or a bad signature of its key);
 * 409 (`text/x.tlog.size`, the size it holds) when the old size is not the size it last cosigned;
 * 422 when the proof does not verify from what it holds, a size-0 checkpoint lacks the empty root,
 * or one size comes with a second root; else 200 with its cosignature line(s) and the next state.
 */
export function addCheckpoint(
  config: WitnessConfig,
  state: WitnessState,
  body: string,
  now: number,
  engine: SignatureEngine = nobleEngine,
  sha256: Sha256 = defaultSha256,
): WitnessResponse {
  const request = parseAddCheckpoint(body);
  if (request === undefined) return answer(400, "malformed add-checkpoint request\n");
  const note = parseNote(request.checkpoint);
  const checkpoint = note === undefined ? undefined : parseCheckpoint(note.text);
  if (note === undefined || checkpoint === undefined) return answer(400, "malformed checkpoint\n");
  // Own members only: anyone may post, and an origin such as "constructor" names no log.
  const keys = Object.hasOwn(config.logs, checkpoint.origin) ? config.logs[checkpoint.origin] : undefined;
  if (keys === undefined) return answer(404, "unknown log origin\n");
  if (logSigned(request.checkpoint, keys, engine) !== "good")
    return answer(403, "checkpoint is not signed by the log\n");
  if (request.oldSize > checkpoint.size) return answer(400, "old size is above the checkpoint's size\n");
  const held = Object.hasOwn(state, checkpoint.origin) ? state[checkpoint.origin] : undefined;
  const heldSize = held?.size ?? 0;
  if (request.oldSize !== heldSize) return answer(409, `${heldSize}\n`, "text/x.tlog.size");
  const problem = consistencyProblem(held, request, checkpoint, sha256);
  if (problem !== undefined) return answer(422, `${problem}\n`);
  const lines = config.signers.map((signer) => cosignLine(signer, note.text, now));
  return {
    ...answer(200, lines.join("")),
    state: { ...state, [checkpoint.origin]: { size: checkpoint.size, root: checkpoint.root.slice() } },
  };
}

function consistencyProblem(
  held: WitnessLogState | undefined,
  request: AddCheckpointRequest,
  checkpoint: Checkpoint,
  sha256: Sha256,
): string | undefined {
  if (request.oldSize === 0)
    return request.proof.length === 0 ? undefined : "a proof from size 0 must be empty";
  const oldRoot = (held as WitnessLogState).root;
  if (request.oldSize === checkpoint.size) {
    if (request.proof.length > 0) return "a proof between equal sizes must be empty";
    return bytesEqual(oldRoot, checkpoint.root) ? undefined : "a second root for a size already cosigned";
  }
  return verifyConsistency(request.oldSize, checkpoint.size, oldRoot, checkpoint.root, request.proof, sha256)
    ? undefined
    : "the consistency proof does not verify";
}

/** What the log makes of a witness's answer. */
export type WitnessReply =
  | { kind: "cosigned"; lines: string[] }
  | { kind: "stale"; size: number }
  | { kind: "refused"; status: number; message: string };

/**
 * Reads a witness's answer: 200 gives its signature lines (the log verifies them with the witness's
 * key, like a merchant, before serving them); 409 gives the size the witness holds, to retry from
 * with a proof from that size; anything else is a refusal to report.
 */
export function readWitnessReply(status: number, contentType: string, body: string): WitnessReply {
  if (status === 200) {
    const lines = body.split("\n").slice(0, -1);
    if (
      !body.endsWith("\n") ||
      lines.length === 0 ||
      lines.some((l) => parseSignatureLine(l) === undefined)
    ) {
      return { kind: "refused", status, message: "malformed cosignature lines" };
    }
    return { kind: "cosigned", lines: lines.map((l) => `${l}\n`) };
  }
  if (status === 409 && contentType.startsWith("text/x.tlog.size")) {
    const m = /^(0|[1-9][0-9]{0,15})\n$/.exec(body);
    if (m !== null) return { kind: "stale", size: Number(m[1]) };
  }
  return { kind: "refused", status, message: body.slice(0, 200) };
}
