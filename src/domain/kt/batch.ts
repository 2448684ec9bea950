import { createHash } from "node:crypto";
import { fromBase64Strict, utf8 } from "../../kt/bytes.js";
import { type DirectorySnapshot, MAX_SNAPSHOT_HOURS, parseDirectory } from "../../kt/directory.js";
import { canonicalJson, type Json } from "../../kt/json.js";
import { directoryLeaf, OPENING_BYTES, statementLeaf } from "../../kt/leaves.js";
import { nodeSha256 } from "../../kt/node-engine.js";
import { formatTime, HASHED_PAN, PAR, type StatementType, withCardRef } from "../../kt/statements.js";
import { CARD_TRANSFER_TYPE, transferCommitment, transferLeaf } from "../../kt/transfer.js";
import { advanceSequence } from "../../store/kt-sequence.js";
import type {
  KtDirectoryRecord,
  KtLeafRecord,
  KtLogStore,
  KtPendingRecord,
  KtPendingStatement,
  KtPendingTransfer,
  KtSequenceState,
} from "../../store/kt-types.js";
import type { CardRefSeal } from "./card-seal.js";
import type { DirectorySource } from "./directory-source.js";
import { checkStatement, type KtSigningKeys, orderOf } from "./statement-check.js";

/**
 * What the sequencer appends in one round, decided from the pending records (pure apart from its
 * reads): each statement checked again (the card reference unsealed, the signed bytes rebuilt, the
 * signature, the root chain, the order facts the store checked at intake, and the order against what
 * the log appended), then its leaf; statements whose version is ahead of the log wait for the ones
 * before them; refused ones are marked with the reason. A directory snapshot goes last when asked for.
 */

/** Statement types whose appending changes the directory, so a snapshot follows. */
const DIRECTORY_TYPES: ReadonlySet<StatementType> = new Set([
  "receipts.v1/escrow-key",
  "receipts.v1/signing-key",
  "receipts.v1/signing-key-revocation",
  "receipts.v1/require-bindings",
  "receipts.v1/bin-claim",
  "receipts.v1/bin-release",
  "receipts.v1/plaintext-intake",
]);

export interface BatchDeps {
  log: KtLogStore;
  seal: CardRefSeal;
  signingKeys: KtSigningKeys;
  maxBindingDays: number;
}

/** The leaves, consumed and refused records of a round, before the snapshot. */
export interface PlannedBatch {
  leaves: Array<{ record: Omit<KtLeafRecord, "index">; bytes: Uint8Array }>;
  consumed: string[];
  refused: Array<{ id: string; reason: string }>;
  sequences: Array<{ sequence: string; before: number; after: KtSequenceState }>;
  /** A pending directory change or a directory statement was taken: a snapshot must follow. */
  directoryChanged: boolean;
}

/** A pending record with a place in a sequence: a statement, or the operator's card transfer. */
type Ordered = KtPendingStatement | KtPendingTransfer;

type Verdict =
  | { ok: true; bytes: Uint8Array; leaf: Omit<KtLeafRecord, "index">; changesDirectory: boolean }
  | { ok: false; reason: string };

/** Plans the statements of `pending` (in their order) at `now`. */
export async function planBatch(
  deps: BatchDeps,
  pending: KtPendingRecord[],
  now: Date,
): Promise<PlannedBatch> {
  const plan: PlannedBatch = {
    leaves: [],
    consumed: [],
    refused: [],
    sequences: [],
    directoryChanged: false,
  };
  const ordered = pending.filter((p): p is KtPendingRecord & Ordered => p.kind !== "directory");
  const logged = await deps.log.loggedStates([...new Set(ordered.map((s) => s.order.sequence))]);
  const states = new Map(logged);
  const waiting = new Map<string, Array<{ record: Ordered; verdict: Verdict & { ok: true } }>>();
  const place = (record: Ordered, verdict: Verdict & { ok: true }): void => {
    const sequence = record.order.sequence;
    const before = states.get(sequence);
    const next = advanceSequence(before, record.order);
    if (!next.ok) {
      if (record.order.version > (before?.version ?? 0) + 1) {
        waiting.set(sequence, [...(waiting.get(sequence) ?? []), { record, verdict }]);
      } else {
        plan.refused.push({ id: record.id, reason: `out of order in the log: ${next.reason}` });
      }
      return;
    }
    states.set(sequence, next.value);
    plan.consumed.push(record.id);
    plan.leaves.push({ record: verdict.leaf, bytes: verdict.bytes });
    if (verdict.changesDirectory) plan.directoryChanged = true;
    const queued = waiting.get(sequence) ?? [];
    waiting.delete(sequence);
    for (const later of queued.sort((a, b) => a.record.order.version - b.record.order.version)) {
      place(later.record, later.verdict);
    }
  };
  for (const record of pending) {
    if (record.kind === "directory") {
      plan.consumed.push(record.id);
      plan.directoryChanged = true;
      continue;
    }
    const verdict =
      record.kind === "transfer" ? transferVerdict(record, now) : await verifyPending(deps, record, now);
    if (verdict.ok) place(record, verdict);
    else plan.refused.push({ id: record.id, reason: verdict.reason });
  }
  for (const [sequence, state] of states) {
    if (state !== logged.get(sequence)) {
      plan.sequences.push({ sequence, before: logged.get(sequence)?.version ?? 0, after: state });
    }
  }
  return plan;
}

/** Checks one pending statement as at intake, and builds its leaf bytes. */
async function verifyPending(deps: BatchDeps, record: KtPendingStatement, now: Date): Promise<Verdict> {
  let bytes: Uint8Array;
  let par: string | undefined;
  if (record.card !== undefined) {
    const ref = deps.seal.open(record.id, record.card.sealedRef);
    if (ref === undefined) return { ok: false, reason: "its sealed card reference does not open" };
    const rule = record.card.kind === "par" ? PAR : HASHED_PAN;
    if (rule(ref) !== undefined)
      return { ok: false, reason: `its card reference is not a ${record.card.kind}` };
    try {
      bytes = withCardRef(record.statement, ref);
    } catch (err) {
      return { ok: false, reason: (err as Error).message };
    }
    if (record.card.kind === "par") par = ref;
  } else {
    bytes = utf8(record.statement);
  }
  const signature = fromBase64Strict(record.signature, 64);
  const opening = fromBase64Strict(record.opening, OPENING_BYTES);
  if (signature === undefined || opening === undefined)
    return { ok: false, reason: "bad signature or opening" };
  const check = await checkStatement(
    { tenantId: record.tenantId, statement: bytes, signature, signingKeyId: record.signingKeyId },
    deps.signingKeys,
    { maxBindingDays: deps.maxBindingDays },
  );
  if (!check.ok) return { ok: false, reason: `${check.check}: ${check.reason}` };
  if (
    canonicalJson(orderOf(check.statement, record.card) as unknown as Json) !==
    canonicalJson(record.order as unknown as Json)
  ) {
    return { ok: false, reason: "its order facts are not the statement's" };
  }
  const leaf = statementLeaf({ signerSpki: check.signer.spki, opening, statement: bytes, par }, nodeSha256);
  const type = check.statement.type;
  return {
    ok: true,
    bytes: leaf,
    leaf: leafRecordOf(record, type, now),
    changesDirectory: DIRECTORY_TYPES.has(type),
  };
}

/**
 * The operator's card transfer as its `0x03` entry (`kt/transfer.ts`): nobody signs it (the
 * witnessed checkpoint covers it, as it covers snapshots); its leaf record keeps the opening and the
 * keyed card reference beside it, as a statement's does.
 */
function transferVerdict(record: KtPendingTransfer, now: Date): Verdict {
  const opening = fromBase64Strict(record.opening, OPENING_BYTES);
  if (opening === undefined) return { ok: false, reason: "bad opening" };
  const { leaf } = transferLeaf({
    v: 1,
    type: CARD_TRANSFER_TYPE,
    transfer: record.transfer,
    from: record.fromTenant,
    to: record.toTenant,
    card: transferCommitment(opening, record.cardKey, nodeSha256),
    version: record.order.version,
    transferredAt: formatTime(record.createdAt.getTime()),
  });
  const stored: Omit<KtLeafRecord, "index"> = {
    kind: "transfer",
    appendedAt: now,
    pendingId: record.id,
    sequence: record.order.sequence,
    version: record.order.version,
    opening: record.opening,
    cardKey: record.cardKey,
    userId: record.userId,
  };
  return { ok: true, bytes: leaf, leaf: stored, changesDirectory: false };
}

function leafRecordOf(
  record: KtPendingStatement,
  type: StatementType,
  now: Date,
): Omit<KtLeafRecord, "index"> {
  const leaf: Omit<KtLeafRecord, "index"> = {
    kind: "statement",
    appendedAt: now,
    pendingId: record.id,
    tenantId: record.tenantId,
    type,
    sequence: record.order.sequence,
    version: record.order.version,
    statement: record.statement,
    signature: record.signature,
    signingKeyId: record.signingKeyId,
    opening: record.opening,
  };
  if (record.card !== undefined) {
    leaf.cardKind = record.card.kind;
    leaf.cardKey = record.card.key;
  }
  if (record.userId !== undefined) leaf.userId = record.userId;
  return leaf;
}

/** A new directory snapshot at `index`: its record and leaf bytes, or why it cannot be made. */
export async function buildSnapshot(
  source: DirectorySource,
  previous: KtDirectoryRecord | undefined,
  index: number,
  now: Date,
): Promise<{ ok: true; record: KtDirectoryRecord; bytes: Uint8Array } | { ok: false; reason: string }> {
  const before = previous === undefined ? undefined : parseDirectory(previous.json);
  const body = await source.read(now, before?.ok ? before.value : undefined);
  const notAfter = new Date(now.getTime() + MAX_SNAPSHOT_HOURS * 3_600_000);
  const snapshot: DirectorySnapshot = {
    v: 1,
    type: "receipts.v1/directory",
    issuedAt: formatTime(now.getTime()),
    notAfter: formatTime(notAfter.getTime()),
    previous: previous?.index ?? null,
    ...body,
  };
  const json = canonicalJson(snapshot as unknown as Json);
  const parsed = parseDirectory(json);
  if (!parsed.ok) return { ok: false, reason: parsed.reason };
  const sha256 = createHash("sha256").update(json, "utf8").digest("hex");
  return {
    ok: true,
    record: {
      sha256,
      index,
      json,
      issuedAt: new Date(Date.parse(snapshot.issuedAt)),
      notAfter: new Date(Date.parse(snapshot.notAfter)),
    },
    bytes: directoryLeaf(json),
  };
}
