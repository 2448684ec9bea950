import type { Logger } from "pino";
import { AppError } from "../../errors.js";
import { parseDirectory } from "../../kt/directory.js";
import { DEFAULT_MAX_BINDING_DAYS, parseTime } from "../../kt/statements.js";
import type { KtBinMove } from "../../store/kt-issuers.js";
import { advanceSequence, sequenceName } from "../../store/kt-sequence.js";
import type { KtPendingInput } from "../../store/kt-types.js";
import type { BinKind, BinList, Store } from "../../store/types.js";
import type { CarriedStatement, PrefixRef } from "./bin-claims.js";
import { directoryChange } from "./directory-change.js";
import { nextIssuerRecord, putIssuer, rootOf, rootState } from "./issuer-keys.js";
import { pendingStatementOf } from "./service.js";
import { decodeSigned, fieldError, storeSigningKeys, verifySigned } from "./signed.js";
import { orderOf } from "./statement-check.js";

/**
 * A BIN or token BIN moving from tenant A to tenant B (docs/key-transparency.md). While A has a confirmed root the
 * operator cannot simply take A's prefix: the move takes effect at once only with A's root's
 * `receipts.v1/bin-release` naming B (`releases` of B's `PUT .../bins`); without it the move is
 * announced and takes effect {@link BIN_MOVE_DELAY_MS} after the first directory snapshot that shows
 * it (its `effectiveFrom` under B, `effectiveUntil` under A), so that A and everyone watching the log
 * have a week to notice. Until then routing keeps A as the owner: the move is kept in B's issuer
 * record, and {@link settleBinMoves} (run by the key log's sequencer) hands the prefix over once the
 * log's newest snapshot says it is due. A tenant A without a confirmed root gives up a prefix by the
 * operator's word, as before (`conflict` until the operator removes it from A).
 */

/** How long after the first snapshot showing it an unreleased move takes effect: 7 days. */
export const BIN_MOVE_DELAY_MS = 7 * 86_400_000;

/** What B's change does with the prefixes it adds that a tenant with a confirmed root owns. */
export interface MovePlan {
  /** Released by their owner's root: taken from the owner in B's own store step, with its release. */
  released: Array<PrefixRef & { from: string; kt: KtPendingInput }>;
  /** Not released: announced now, moved when due. */
  announced: Array<PrefixRef & { from: string }>;
}

/**
 * Sorts the prefixes `added` to tenant `to` that another tenant owns exactly (same digits, same
 * kind) and that tenant has a confirmed root: released (with the owner root's release in
 * `releases`) or announced. Prefixes owned by a tenant without a root are left for the ordinary
 * `conflict`; a release that matches no such prefix is `invalid_request`.
 */
export async function planMoves(
  store: Store,
  to: string,
  added: readonly PrefixRef[],
  releases: readonly CarriedStatement[],
  now: Date,
): Promise<MovePlan> {
  const plan: MovePlan = { released: [], announced: [] };
  const checked = await Promise.all(releases.map((r, i) => checkRelease(store, to, r, i)));
  const used = new Set<number>();
  for (const { prefix, kind } of added) {
    const from = await store.bins.ownerOf(prefix);
    if (from === undefined || from === to || !(await store.bins.list(from, kind)).includes(prefix)) continue;
    // A prefix moves at once by the operator's word only from a tenant that never had a root: one
    // whose root is revoked (waiting for its recovery root) gives it up only by announcement.
    if (rootState(await store.ktIssuers.get(from)) === "none") continue;
    const i = checked.findIndex((c) => c.from === from && c.prefix === prefix && c.kind === kind);
    const release = checked[i];
    if (release === undefined) {
      plan.announced.push({ prefix, kind, from });
      continue;
    }
    used.add(i);
    const kt = pendingStatementOf({ tenantId: from, ...release.verified }, now);
    plan.released.push({ prefix, kind, from, kt });
  }
  const unused = checked.findIndex((_, i) => !used.has(i));
  if (unused >= 0) {
    throw fieldError(
      `releases[${unused}].statement`,
      "must release a prefix this change takes from its owner",
    );
  }
  return plan;
}

/** A release carried in `releases[i]`: its issuer's root's `bin-release` of a prefix to `to`, next in version. */
async function checkRelease(store: Store, to: string, carried: CarriedStatement, i: number) {
  const field = `releases[${i}]`;
  const bytes = Buffer.from(carried.statement, "base64").toString("utf8");
  let issuer = "";
  try {
    const parsed = JSON.parse(bytes) as { issuer?: unknown };
    if (typeof parsed.issuer === "string") issuer = parsed.issuer;
  } catch {
    // The statement check below names what is wrong with it.
  }
  const root = rootOf(issuer === "" ? undefined : await store.ktIssuers.get(issuer));
  if (root?.status !== "current") {
    throw new AppError("invalid_signature", "A release must be signed by its issuer's confirmed root.", {
      violations: [{ field: `${field}.statement`, description: "names no issuer with a confirmed root" }],
    });
  }
  const decoded = decodeSigned({ ...carried, signingKeyId: root.signingKeyId }, field);
  const verified = await verifySigned(
    issuer,
    decoded,
    storeSigningKeys(store),
    field,
    DEFAULT_MAX_BINDING_DAYS,
  );
  const s = verified.statement as unknown as Record<string, unknown>;
  if (verified.statement.type !== "receipts.v1/bin-release" || s.to !== to) {
    throw fieldError(`${field}.statement`, `must be a bin-release to ${to}`);
  }
  const state = await store.ktLog.sequenceState(sequenceName.tenant(issuer));
  const next = advanceSequence(state, orderOf(verified.statement));
  if (!next.ok) throw fieldError(`${field}.statement.version`, next.reason);
  return { from: issuer, prefix: s.prefix as string, kind: s.kind as BinKind, verified };
}

/**
 * The lists of the owners giving up the released prefixes, each without them (read now): to be
 * written in the taker's own store step (`bins.setLists`), with their releases, so that a failure
 * leaves each prefix with its old owner or its new one, never with nobody.
 */
export async function releasedLists(
  store: Store,
  plan: MovePlan,
): Promise<{ lists: BinList[]; kt: KtPendingInput[] }> {
  const lists: BinList[] = [];
  for (const { from, kind } of plan.released) {
    if (lists.some((l) => l.tenantId === from && l.kind === kind)) continue;
    const gone = plan.released.filter((r) => r.from === from && r.kind === kind).map((r) => r.prefix);
    const bins = (await store.bins.list(from, kind)).filter((p) => !gone.includes(p));
    lists.push({ tenantId: from, kind, bins });
  }
  return { lists, kt: plan.released.map((r) => r.kt) };
}

/**
 * Records `to`'s moves after its change to `keep`: the announced ones added, those of prefixes it no
 * longer asks for dropped (the next snapshot shows them). Writes nothing when nothing changed.
 */
export async function announceMoves(
  store: Store,
  to: string,
  plan: MovePlan,
  keep: readonly PrefixRef[],
  now: Date,
): Promise<void> {
  const record = await store.ktIssuers.get(to);
  const before = record?.binMoves ?? [];
  const kept = before.filter((m) => keep.some((k) => k.prefix === m.prefix && k.kind === m.kind));
  if (plan.announced.length === 0 && kept.length === before.length) return;
  const updated = nextIssuerRecord(record, to, now);
  updated.binMoves = [
    ...kept,
    ...plan.announced.map(({ prefix, kind, from }) => ({ prefix, kind, from, requestedAt: now })),
  ];
  await putIssuer(store, updated, [directoryChange("bins.move_announced", now, to)]);
}

/**
 * Hands over every announced move the log's newest snapshot shows as due at `now` (its
 * `effectiveFrom` under the new owner passed): the prefix leaves the old owner and joins the new
 * one, each a directory change, and the move leaves the record. A move no snapshot shows yet waits.
 * Failures are logged; the next round tries again.
 */
export async function settleBinMoves(store: Store, now: Date, logger?: Logger): Promise<number> {
  // Only tenants with a move requested a full delay ago can have one due: an indexed query.
  const pending = await store.ktIssuers.withBinMovesBefore(new Date(now.getTime() - BIN_MOVE_DELAY_MS));
  if (pending.length === 0) return 0;
  const head = await store.ktLog.head();
  const latest = await store.ktLog.directoryBefore(head.size);
  const snapshot = latest === undefined ? undefined : parseDirectory(latest.json);
  if (snapshot === undefined || !snapshot.ok) return 0;
  let settled = 0;
  for (const record of pending) {
    const entry = snapshot.value.issuers.find((i) => i.issuer === record.tenantId);
    const due = (record.binMoves ?? []).filter((m) => {
      const shown = entry?.prefixes.find((p) => p.prefix === m.prefix && p.kind === m.kind);
      return shown !== undefined && (parseTime(shown.effectiveFrom) as number) <= now.getTime();
    });
    for (const move of due) {
      try {
        await handOver(store, record.tenantId, move, now);
        settled += 1;
      } catch (err) {
        logger?.warn({ err, tenant: record.tenantId }, "a due BIN move could not be handed over");
      }
    }
  }
  return settled;
}

/**
 * Hands one due move over in one store step: the prefix leaves the old owner's list of its kind and
 * joins the new owner's, each with its directory change. The move then leaves the new owner's record;
 * if that write fails, the next round finds the prefix already moved and hands over nothing new.
 */
async function handOver(store: Store, to: string, move: KtBinMove, now: Date): Promise<void> {
  const left = (await store.bins.list(move.from, move.kind)).filter((p) => p !== move.prefix);
  const mine = [...new Set([...(await store.bins.list(to, move.kind)), move.prefix])].sort();
  const out = await store.bins.setLists(
    [
      { tenantId: move.from, kind: move.kind, bins: left },
      { tenantId: to, kind: move.kind, bins: mine },
    ],
    now,
    [directoryChange("bins.moved_away", now, move.from), directoryChange("bins.moved_in", now, to)],
  );
  if (out.kind !== "set") throw new Error(`the move could not be handed over: ${out.kind}`);
  const record = await store.ktIssuers.get(to);
  const updated = nextIssuerRecord(record, to, now);
  updated.binMoves = (updated.binMoves ?? []).filter(
    (m) => !(m.prefix === move.prefix && m.kind === move.kind),
  );
  await putIssuer(store, updated, []);
}
