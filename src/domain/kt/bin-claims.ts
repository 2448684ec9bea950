import { AppError } from "../../errors.js";
import { DEFAULT_MAX_BINDING_DAYS } from "../../kt/statements.js";
import { advanceSequence, sequenceName } from "../../store/kt-sequence.js";
import type { KtPendingInput, KtSequenceState } from "../../store/kt-types.js";
import type { BinKind, Store } from "../../store/types.js";
import { refuseWhileRecovering, rootOf } from "./issuer-keys.js";
import { pendingStatementOf } from "./service.js";
import {
  decodeSigned,
  fieldError,
  storeSigningKeys,
  type VerifiedStatement,
  verifySigned,
} from "./signed.js";
import { orderOf } from "./statement-check.js";

/**
 * BIN and token-BIN claims as the tenant's root signs them (docs/key-transparency.md). Once a tenant
 * has a confirmed root, the operator's `PUT /admin/v1/issuers/{tenant}/bins` carries, in `statements`,
 * one root-signed `receipts.v1/bin-claim` for every prefix it adds and one `receipts.v1/bin-release`
 * for every prefix it removes (of `bins` kind `bin`, of `tokenBins` kind `token-bin`), their versions following the tenant's statements (last + 1, + 2, ...);
 * nothing else, and nothing missing. Without them the change is `invalid_signature`: the operator
 * alone can no longer give a tenant's cards to someone else or take them away. Before the tenant has
 * a confirmed root the operator's word stands, as it always did.
 */

/** One signed statement as the operator's request carries it (base64 of the bytes and the signature). */
export interface CarriedStatement {
  statement: string;
  signature: string;
}

/** At most this many statements in one request. */
const MAX_STATEMENTS = 2_000;

/** The `statements` member of a request: a list of `{statement, signature}`, or `invalid_request`. */
export function carriedStatements(value: unknown, field = "statements"): CarriedStatement[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || value.length > MAX_STATEMENTS) {
    throw fieldError(field, `must be a list of at most ${MAX_STATEMENTS} {statement, signature}`);
  }
  return value.map((item, i) => {
    const entry = (typeof item === "object" && item !== null ? item : {}) as Record<string, unknown>;
    if (typeof entry.statement !== "string" || typeof entry.signature !== "string") {
      throw fieldError(`${field}[${i}]`, "must be {statement, signature}, each a base64 string");
    }
    return { statement: entry.statement, signature: entry.signature };
  });
}

/**
 * The pending statements of a BIN change of `tenant` from `before` to `after`, checked: undefined
 * when the tenant has no confirmed root (the operator's word stands), else exactly one root-signed
 * claim per added prefix and release per removed one, in version order.
 */
export async function binChangeStatements(
  store: Store,
  tenant: string,
  change: { before: readonly PrefixRef[]; after: readonly PrefixRef[] },
  carried: readonly CarriedStatement[],
  now: Date,
): Promise<KtPendingInput[] | undefined> {
  const record = await store.ktIssuers.get(tenant);
  const root = rootOf(record);
  const added = refsMinus(change.after, change.before);
  const removed = refsMinus(change.before, change.after);
  if (added.length + removed.length > 0) refuseWhileRecovering(record);
  if (root?.status !== "current") return undefined;
  if (added.length + removed.length > 0 && carried.length === 0) {
    throw new AppError(
      "invalid_signature",
      "This tenant's BINs change only with statements its root signed.",
      {
        violations: [
          { field: "statements", description: "is required: the root's bin-claim or bin-release per prefix" },
        ],
      },
    );
  }
  const checked: VerifiedStatement[] = [];
  for (const [i, item] of carried.entries()) {
    const decoded = decodeSigned({ ...item, signingKeyId: root.signingKeyId }, `statements[${i}]`);
    const keys = storeSigningKeys(store);
    checked.push(await verifySigned(tenant, decoded, keys, `statements[${i}]`, DEFAULT_MAX_BINDING_DAYS));
  }
  matchChange(checked, added, removed);
  await checkVersions(store, tenant, checked);
  return checked.map((c) => pendingStatementOf({ tenantId: tenant, ...c }, now));
}

/** A prefix and its kind: the first digits of a card number (`bin`) or of a wallet's token (`token-bin`). */
export interface PrefixRef {
  prefix: string;
  kind: BinKind;
}

/** The refs of `a` not in `b`. */
export function refsMinus(a: readonly PrefixRef[], b: readonly PrefixRef[]): PrefixRef[] {
  return a.filter((x) => !b.some((y) => y.prefix === x.prefix && y.kind === x.kind));
}

/**
 * Each added prefix claimed once, each removed one released once, each with the prefix's kind (a
 * token BIN's claim is no claim of a card BIN of the same digits), and no other statement.
 */
function matchChange(checked: readonly VerifiedStatement[], added: PrefixRef[], removed: PrefixRef[]): void {
  const want = new Map<string, string>([
    ...added.map((p) => [`${p.kind} ${p.prefix}`, "receipts.v1/bin-claim"] as const),
    ...removed.map((p) => [`${p.kind} ${p.prefix}`, "receipts.v1/bin-release"] as const),
  ]);
  for (const [i, { statement }] of checked.entries()) {
    const s = statement as unknown as Record<string, unknown>;
    const key = `${String(s.kind)} ${typeof s.prefix === "string" ? s.prefix : ""}`;
    if (want.get(key) !== statement.type) {
      throw fieldError(
        `statements[${i}].statement`,
        "must be the root's bin-claim of a prefix the change adds, or its bin-release of one it removes (of its kind, bin or token-bin), each once",
      );
    }
    want.delete(key);
  }
  const [missing] = want.keys();
  if (missing !== undefined) {
    throw new AppError(
      "invalid_signature",
      "Every BIN or token BIN the change adds or removes needs the root's statement.",
      {
        violations: [{ field: "statements", description: `has no statement for the ${missing}` }],
      },
    );
  }
}

/** The statements' versions follow the tenant's sequence: last + 1, + 2, ... in the order carried. */
async function checkVersions(
  store: Store,
  tenant: string,
  checked: readonly VerifiedStatement[],
): Promise<void> {
  let state: KtSequenceState | undefined = await store.ktLog.sequenceState(sequenceName.tenant(tenant));
  for (const [i, c] of checked.entries()) {
    const next = advanceSequence(state, orderOf(c.statement));
    if (!next.ok) throw fieldError(`statements[${i}].statement.version`, next.reason);
    state = next.value;
  }
}
