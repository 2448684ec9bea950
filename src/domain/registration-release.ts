import { AppError } from "../errors.js";
import type { DomainDeps } from "./deps.js";
import { type ReleaseCounts, type ReleaseTarget, releaseEscrow } from "./escrow.js";
import type { CallerInfo } from "./grants.js";
import { type RegisterBindings, registeredAnswers } from "./kt/register-bindings.js";
import { verifiedReleaseTarget } from "./kt/release-check.js";
import type { CardRef } from "./routing.js";

/*
 * What a registration releases, and when (onboarding.ts's `register` calls one of the two entries):
 * a tenant without requireBindings releases the card's escrow to the registered key at once
 * ({@link releaseThenAnswer}); a tenant with requireBindings only once the key log vouches for the
 * key ({@link answerThenRelease}). Either way at most `escrow.releasePerCall` receipts move within the
 * call and the rest in the background.
 */

/** The key-directory members of a register answer. */
export type RegisterKt = Awaited<ReturnType<typeof registeredAnswers>>;

/**
 * A tenant without requireBindings: releases the card's escrow to the registered key, then waits for
 * the binding's leaf under a checkpoint (if the registration carries one).
 */
export async function releaseThenAnswer(
  deps: DomainDeps,
  context: {
    refs: { panHash: string; aliasPanHash?: string };
    bindings: RegisterBindings;
    target: Omit<ReleaseTarget, "panHash">;
  },
  caller: CallerInfo,
): Promise<{ counts: ReleaseCounts; kt: RegisterKt }> {
  const counts = await releaseCardEscrow(deps, context.refs, context.target, caller);
  return { counts, kt: await registeredAnswers(deps, context.bindings) };
}

/** What a requireBindings registration's release needs: the card in the clear, its keyed references, the user. */
export interface CheckedRelease {
  /** The card as the request named it. */
  input: { hashedPan: string; par?: string | undefined; cardBin?: string | undefined };
  refs: { panHash: string; aliasPanHash?: string };
  bindings: RegisterBindings;
  userId: string;
}

/** Background waits for a binding's checkpoint (each `KT_LOG_WAIT_MS`) after the answer gave up. */
const BACKGROUND_RELEASE_WAITS = 3;

/**
 * A tenant with requireBindings (docs/key-transparency.md, "Server-side sealing"): waits for the
 * binding's leaf under a checkpoint first, then releases to the user's key only once it verifies
 * against that checkpoint ({@link verifiedReleaseTarget}). When the wait gives up
 * (`service_unavailable`), a background task waits on and releases once the checkpoint holds the
 * binding; the registration sent again releases too. Each receipt is released once whoever gets
 * there first (the store's release takes only a receipt still escrowed), and what neither releases
 * stays escrowed for the card's next registration.
 */
export async function answerThenRelease(
  deps: DomainDeps,
  release: CheckedRelease,
  caller: CallerInfo,
): Promise<{ counts: ReleaseCounts; kt: RegisterKt }> {
  let kt: RegisterKt;
  try {
    kt = await registeredAnswers(deps, release.bindings);
  } catch (err) {
    if (err instanceof AppError && err.code === "service_unavailable") {
      deps.background.run("escrow release", () => releaseOnceLogged(deps, release, caller));
    }
    throw err;
  }
  return { counts: await releaseVerified(deps, release, caller), kt };
}

async function releaseOnceLogged(
  deps: DomainDeps,
  release: CheckedRelease,
  caller: CallerInfo,
): Promise<void> {
  for (let wait = 0; wait < BACKGROUND_RELEASE_WAITS; wait++) {
    try {
      await registeredAnswers(deps, release.bindings);
    } catch (err) {
      if (err instanceof AppError && err.code === "service_unavailable") continue;
      throw err;
    }
    await releaseVerified(deps, release, caller);
    return;
  }
  deps.logger.warn(
    { userId: release.userId },
    "escrow release: the binding is not logged yet; it stays escrowed",
  );
}

/** Releases the card's escrow to the user's key as stored, once it verifies against the key log. */
async function releaseVerified(
  deps: DomainDeps,
  release: CheckedRelease,
  caller: CallerInfo,
): Promise<ReleaseCounts> {
  const card: CardRef = { recipientHashedPan: (release.input.hashedPan ?? "").toLowerCase() };
  if (release.input.par) card.recipientPar = release.input.par;
  if (release.input.cardBin) card.cardBin = release.input.cardBin;
  const to = await verifiedReleaseTarget(deps, card, release.userId, caller);
  if (to === undefined) return { released: 0, held: 0 };
  return releaseCardEscrow(deps, release.refs, to, caller);
}

/**
 * Releases the escrow of each of the card's references (its hashed PAN's and its PAR's, when the call
 * names both: receipts escrowed under either are the card's) with {@link releaseFirstPage}; the
 * counts add up.
 */
async function releaseCardEscrow(
  deps: DomainDeps,
  refs: { panHash: string; aliasPanHash?: string },
  to: Omit<ReleaseTarget, "panHash">,
  caller: CallerInfo,
): Promise<ReleaseCounts> {
  const total: ReleaseCounts = { released: 0, held: 0 };
  for (const panHash of [refs.panHash, ...(refs.aliasPanHash === undefined ? [] : [refs.aliasPanHash])]) {
    const counts = await releaseFirstPage(deps, { ...to, panHash }, caller);
    total.released += counts.released;
    total.held += counts.held;
    if (counts.nextCursor !== undefined) total.nextCursor = counts.nextCursor;
  }
  return total;
}

/**
 * Releases the card's escrow up to `escrow.releasePerCall` receipts within the call, and the rest in
 * the background, so that no amount of escrow (planted or not) makes a registration slow. A failure
 * never fails the registration: the user exists now and the caller must learn its id. What was not
 * released stays escrowed, and the next registration of the card (or a rotation) releases it.
 */
async function releaseFirstPage(
  deps: DomainDeps,
  target: ReleaseTarget,
  caller: CallerInfo,
): Promise<ReleaseCounts> {
  try {
    const counts = await releaseEscrow(deps, target, caller, { limit: deps.escrow.releasePerCall });
    const cursor = counts.nextCursor;
    if (cursor !== undefined) {
      deps.background.run("escrow release", () => releaseEscrow(deps, target, caller, { cursor }));
    }
    return counts;
  } catch (err) {
    deps.logger.warn({ err, userId: target.user.userId }, "escrow release during registration failed");
    return { released: 0, held: 0 };
  }
}
