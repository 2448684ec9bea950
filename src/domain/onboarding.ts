import { parsePublicKey } from "../crypto/keys.js";
import { KEY_ALGORITHMS, RSA_OAEP_256, suiteNamed } from "../crypto/suites.js";
import { AppError, Violations } from "../errors.js";
import { isUuidV4, randomId, uuid } from "../ids.js";
import type { ApiKeyRecord, KeyAlgorithm, KeyRecord, RegisterOutcome } from "../store/types.js";
import { recordChange } from "./audit.js";
import type { DomainDeps } from "./deps.js";
import { registerEvents } from "./events.js";
import { type CallerInfo, INTERNAL_CALLER } from "./grants.js";
import type { KtAnswerFields } from "./kt/answers.js";
import {
  checkRegisterBindings,
  pendingOf,
  type RegisterBindings,
  refuseOneOfTwoReferences,
} from "./kt/register-bindings.js";
import { releaseNeedsCheck } from "./kt/release-check.js";
import type { SignedInput } from "./kt/signed.js";
import { cardKeysOf, checkCardBin, checkRegisteredCard, ISSUER_CARD_FIELDS } from "./pan.js";
import { answerThenRelease, releaseThenAnswer } from "./registration-release.js";
import { cardBinOwner, sealingKeyOf } from "./routing.js";

/** A generated key pair; the private key is returned to the caller once and never kept. */
export interface GeneratedKeys {
  keyId: string;
  publicKey: string;
  privateKey: string;
  algorithm: KeyAlgorithm;
}

/**
 * Generates a key pair of the asked suite (RSA-2048 by default, or P-256) off the event loop (on the
 * pool's key-generation workers, which yield the CPU to the event loop) and remembers only its public
 * key (as a pending key of the caller's tenant), so that `register` can check the pair it is given.
 */
export async function generateKeys(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { algorithm: string } = { algorithm: "" },
): Promise<GeneratedKeys> {
  const algorithm = suiteNamed(input.algorithm)?.algorithm;
  if (algorithm === undefined) {
    const violations = new Violations();
    violations.add("algorithm", `must be one of ${KEY_ALGORITHMS.join(", ")}`);
    violations.throwIfAny();
    throw new AppError("internal_server_error", "unreachable");
  }
  const pair = await deps.pool.generateKeyPair(algorithm);
  const keyId = uuid();
  const stored = await deps.store.users.insertPendingKey({
    keyId,
    tenantId: principal.tenantId,
    publicKey: pair.publicKey,
    algorithm,
    status: "pending",
    createdAt: deps.clock.now(),
  });
  if (!stored) throw new AppError("internal_server_error", "Could not allocate a key id.");
  return { keyId, publicKey: pair.publicKey, privateKey: pair.privateKey, algorithm };
}

/** A register request after transport decoding. */
export interface RegisterInput {
  hashedPan: string;
  /** The card's PAR, instead of `hashedPan`: exactly one of the two. */
  par?: string | undefined;
  publicKey: string;
  keyId: string;
  /** The card's first 6 or 8 digits, when the issuer sends them. */
  cardBin?: string | undefined;
  /** The issuer's signed key binding for this card and key (docs/key-transparency.md); with both references, the hashed PAN's. */
  binding?: SignedInput | undefined;
  /** With both references: the PAR's signed key binding (one binding per card reference). */
  parBinding?: SignedInput | undefined;
}

/**
 * The outcome of a registration, as returned to the issuer; with a binding, the key directory's
 * members a look-up answers (`binding`, `opening`, `proof`, `directory`), under a checkpoint the log
 * signed over the binding's leaf.
 */
export interface Registration extends Omit<KtAnswerFields, "checkpoint"> {
  /** With a `parBinding`: the PAR's binding and proofs, as a lookup by the PAR answers them. */
  parAnswer?: KtAnswerFields;
  userId: string;
  keyId: string;
  status: "active";
  registeredAt: Date;
  /** Escrowed receipts this call released (at most `escrow.releasePerCall`). */
  releasedReceipts: number;
  /** Escrowed receipts this call looked at that stay escrowed. */
  heldReceipts: number;
  /** True when the card had more escrow than one call releases: the rest is released after it answered. */
  releasePending: boolean;
  algorithm: KeyAlgorithm;
  /** This registration, inside the caller's own BIN, took the card from another issuer's user. */
  superseded: boolean;
  /** The registered key (base64 SPKI DER), as a look-up answers it. */
  publicKey: string;
}

/** A register request that passed its field checks. */
interface CheckedRegistration {
  keyId: string;
  spki: string;
  algorithm: KeyAlgorithm;
  cardBin: string | undefined;
}

/** Checks every field of a register request at once (`invalid_request` naming each). */
function checkRegisterInput(input: RegisterInput): CheckedRegistration {
  const violations = new Violations();
  checkRegisteredCard(input, ISSUER_CARD_FIELDS, violations);
  if (input.keyId === "") violations.add("keyId", "is required");
  else if (!isUuidV4(input.keyId)) violations.add("keyId", "must be a UUID v4");
  const cardBin = checkCardBin(input.cardBin, "cardBin", violations);
  let spki = "";
  let algorithm: KeyAlgorithm = RSA_OAEP_256;
  if (input.publicKey === "") violations.add("publicKey", "is required");
  else {
    try {
      ({ spki, algorithm } = parsePublicKey(input.publicKey, "publicKey"));
    } catch (err) {
      if (!(err instanceof AppError)) throw err;
      for (const v of err.violations) violations.add(v.field, v.description);
    }
  }
  violations.throwIfAny();
  return { keyId: input.keyId.toLowerCase(), spki, algorithm, cardBin };
}

/**
 * Registers a cardholder's public key of either suite under a hashed PAN: creates
 * the user, or rotates the key of a card the same tenant registered before, then releases the card's
 * escrowed receipts that this tenant may have. With a `cardBin`: inside another tenant's BIN it is
 * `forbidden`; inside the caller's own BIN it supersedes another tenant's registration of the card
 * (`card_binding_conflict` in both tenants' audit) and so receives the card's escrow.
 *
 * Atomic for the caller: every refusal comes before the store's one atomic step, which creates (or
 * supersedes, or rotates) and refuses (writing nothing) in one; nothing after it can fail the call but
 * the audit write. A receipt that cannot be released stays escrowed (counted in `heldReceipts`), and a
 * store failure while releasing leaves the rest escrowed for the next registration of the card: the
 * issuer always learns the `userId` of a user that was created.
 */
export async function register(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: RegisterInput,
  caller: CallerInfo = INTERNAL_CALLER,
): Promise<Registration> {
  const checked = checkRegisterInput(input);
  const { keyId, spki, algorithm } = checked;
  const refs = cardKeysOf(deps.pepper, input);
  const newUserId = randomId("usr", 12);
  const bindings = await bindingsOf(deps, principal, input, { ...checked, refs, newUserId });
  // A signed binding names the card's BIN: its owner decides as a cardBin would.
  const cardBin = checked.cardBin ?? bindings.main?.statement.bin ?? bindings.par?.statement.bin;
  const binOwner = await cardBinOwner(deps, cardBin);
  refuseOthersBin(binOwner, principal.tenantId, "cardBin");
  await refuseUnownedParBin(deps, principal.tenantId, input, bindings, binOwner, cardBin);
  const existing = await deps.store.users.findKey(keyId);
  if (existing && existing.tenantId !== principal.tenantId) {
    throw new AppError("conflict", "This keyId is already in use.");
  }
  if (existing?.status === "pending" && existing.publicKey !== spki) {
    throw new AppError("forbidden", "The public key does not match the key generated for this keyId.");
  }

  const now = deps.clock.now();
  const key: KeyRecord = {
    keyId,
    tenantId: principal.tenantId,
    publicKey: spki,
    algorithm,
    status: "active",
    createdAt: existing?.createdAt ?? now,
    registeredAt: now,
  };
  const outcome = await deps.store.users.register({
    ...refs,
    tenantId: principal.tenantId,
    newUserId,
    key,
    now,
    ...(pendingOf(bindings).length === 0 ? {} : { kt: pendingOf(bindings) }),
    ownsBin: binOwner !== undefined,
    events: (registered) => registerEvents(registered, now, cardBin),
  });
  throwIfRefused(outcome);
  if (pendingOf(bindings).length > 0) deps.kt.notify();
  await auditRegistration(deps, principal, outcome, { cardBin: cardBin ?? "", now, caller });

  const target = { user: outcome.user, key: sealingKeyOf(outcome.key) };
  const { counts, kt } = (await releaseNeedsCheck(deps, principal.tenantId))
    ? await answerThenRelease(deps, { input, refs, bindings, userId: outcome.user.userId }, caller)
    : await releaseThenAnswer(deps, { refs, bindings, target }, caller);
  return {
    userId: outcome.user.userId,
    keyId,
    status: "active",
    registeredAt: outcome.key.registeredAt ?? now,
    releasedReceipts: counts.released,
    heldReceipts: counts.held,
    releasePending: counts.nextCursor !== undefined,
    algorithm,
    superseded: outcome.kind === "superseded",
    publicKey: outcome.key.publicKey,
    ...kt,
  };
}

/**
 * The register request's bindings checked against it (`kt/register-bindings.ts`), or `forbidden`
 * without them when the tenant requires bindings; none without them otherwise. A signed (or required)
 * registration by one reference of a card the caller's user holds by both is `invalid_request`.
 */
async function bindingsOf(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: RegisterInput,
  checked: CheckedRegistration & { refs: { panHash: string; aliasPanHash?: string }; newUserId: string },
): Promise<RegisterBindings> {
  if (input.binding === undefined && input.parBinding === undefined) {
    if ((await deps.store.ktIssuers.get(principal.tenantId))?.requireBindings !== true) return {};
  }
  const { panHash, aliasPanHash } = checked.refs;
  const user =
    (await deps.store.users.findByPanHash(panHash)) ??
    (aliasPanHash === undefined ? undefined : await deps.store.users.findByPanHash(aliasPanHash));
  const own = user?.tenantId === principal.tenantId ? user : undefined;
  refuseOneOfTwoReferences(input, own);
  return checkRegisterBindings(deps, input, {
    tenantId: principal.tenantId,
    keyId: checked.keyId,
    algorithm: checked.algorithm,
    spki: checked.spki,
    cardBin: checked.cardBin,
    refs: checked.refs,
    userId: own?.userId ?? checked.newUserId,
  });
}

/** `forbidden` naming `field` when the card's BIN belongs to another tenant than the caller. */
function refuseOthersBin(owner: string | undefined, tenantId: string, field: string): void {
  if (owner !== undefined && owner !== tenantId) {
    throw new AppError("forbidden", "This card's BIN belongs to another issuer.", {
      violations: [{ field, description: "belongs to another issuer tenant" }],
    });
  }
}

/**
 * A PAR's binding (`parBinding`, or `binding` when the PAR is the card's only reference) names a token
 * BIN the caller must own: a PAR gives a merchant no card number to read a BIN from, so a BIN of
 * nobody is refused as another issuer's is (`forbidden`).
 */
async function refuseUnownedParBin(
  deps: DomainDeps,
  tenantId: string,
  input: RegisterInput,
  bindings: Awaited<ReturnType<typeof bindingsOf>>,
  cardBinOwnerFound: string | undefined,
  cardBin: string | undefined,
): Promise<void> {
  const parOnly = (input.hashedPan ?? "") === "" && (input.par ?? "") !== "";
  const [binding, field] =
    bindings.par !== undefined
      ? [bindings.par, "parBinding.statement.bin"]
      : [parOnly ? bindings.main : undefined, "binding.statement.bin"];
  if (binding === undefined) return;
  const bin = binding.statement.bin;
  const owner = bin === cardBin ? cardBinOwnerFound : await cardBinOwner(deps, bin);
  refuseOthersBin(owner, tenantId, field);
  if (owner === undefined) {
    throw new AppError("forbidden", "The PAR binding's BIN is not claimed by this issuer.", {
      violations: [{ field, description: "is not a BIN this issuer tenant owns" }],
    });
  }
}

/** The `conflict` of a registration the store refused (writing nothing). */
function throwIfRefused(outcome: RegisterOutcome): asserts outcome is Registered {
  if (outcome.kind === "pan_taken") {
    throw new AppError("conflict", "This card is registered by another issuer.");
  }
  if (outcome.kind === "card_split") {
    throw new AppError(
      "conflict",
      "This hashedPan and par do not name one registered card: one of them is registered with another card reference.",
    );
  }
  if (outcome.kind === "key_taken") throw new AppError("conflict", "This keyId is already in use.");
  if (outcome.kind === "log_refused") {
    throw new AppError(
      "conflict",
      `The key binding does not follow the card's statements: ${outcome.reason}.`,
    );
  }
  if (outcome.kind === "key_mismatch") {
    throw new AppError("conflict", "This keyId is registered with another public key.");
  }
  if (outcome.kind === "key_rotated") {
    throw new AppError(
      "conflict",
      "This keyId was rotated out of the card and is never active again: register a new key.",
    );
  }
}

/** A registration the store made (or found unchanged). */
type Registered = Exclude<
  RegisterOutcome,
  { kind: "pan_taken" | "key_taken" | "key_mismatch" | "key_rotated" | "log_refused" | "card_split" }
>;

/**
 * Writes a registration's key change: `key.registered` (a new user) or `key.rotated`, with the key
 * before and after; a supersession also writes `card_binding_conflict` under both tenants. An
 * unchanged registration changes no key and writes nothing.
 */
async function auditRegistration(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  outcome: Registered,
  context: { cardBin: string; now: Date; caller: CallerInfo },
): Promise<void> {
  const { now, caller, cardBin } = context;
  const own = {
    at: now,
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
  };
  if ((outcome.kind === "unchanged" || outcome.kind === "rotated") && outcome.aliasAdded === true) {
    await recordChange(deps, {
      ...own,
      action: "card.alias_added",
      userId: outcome.user.userId,
      keyId: outcome.key.keyId,
      subject: "the user's card is now also found by its other reference (hashed PAN or PAR)",
    });
  }
  if (outcome.kind === "unchanged") return;
  if (outcome.kind === "superseded") {
    const previous = outcome.previous;
    await recordChange(deps, {
      ...own,
      action: "card_binding_conflict",
      userId: outcome.user.userId,
      subject: `took the card from issuer tenant ${previous.tenantId}'s user (BIN ${cardBin})`,
    });
    await recordChange(deps, {
      ...own,
      action: "card_binding_conflict",
      tenantId: previous.tenantId,
      userId: previous.userId,
      previousKeyId: previous.activeKeyId,
      subject: `the card was taken by the owner of BIN ${cardBin}; this user no longer holds it`,
      actorTenantId: principal.tenantId,
    });
  }
  await recordChange(deps, {
    ...own,
    action: outcome.kind === "rotated" ? "key.rotated" : "key.registered",
    userId: outcome.user.userId,
    keyId: outcome.key.keyId,
    ...(outcome.kind === "rotated" ? { previousKeyId: outcome.previousKeyId } : {}),
  });
}
