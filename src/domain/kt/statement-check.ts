import { nodeEngine } from "../../kt/node-engine.js";
import {
  parseSigningKey,
  type SignatureEngine,
  type SigningKey,
  signingKeyIdOf,
  verifySignature,
} from "../../kt/signatures.js";
import {
  DEFAULT_MAX_BINDING_DAYS,
  parseStatement,
  type Statement,
  TENANT_STATEMENT_TYPES,
} from "../../kt/statements.js";
import { sequenceName } from "../../store/kt-sequence.js";
import type { KtCard, KtOrder } from "../../store/kt-types.js";

/**
 * The check of one signed statement (docs/key-transparency.md), one function for the service at intake
 * (`register`, escrow keys, signing keys, BIN claims: before the change is written) and for the
 * sequencer before it appends: the exact canonical bytes with exactly the members of the type; the
 * issuer is the caller's tenant; the signing key is one of the tenant's, current, and for a tenant
 * statement the tenant's root (the root chain); the signature verifies by the one rule. The order
 * of the statement in its sequence (version last + 1) is checked by the store in the same atomic
 * step as the write (`advanceSequence`), and by the sequencer again against what it appended.
 */

/** A tenant's signing key as the service holds it (the signing-key store answers with these). */
export interface KtSigningKeyInfo {
  tenantId: string;
  signingKeyId: string;
  /** SubjectPublicKeyInfo DER. */
  spki: Uint8Array;
  role: "root" | "signer";
  /** `pending` until the operator confirms a root (or the root endorses a signer); `revoked` for good. */
  status: "pending" | "current" | "revoked";
  /** A retired root: the version of the tenant statement that retired it (`KtSigningKeyRecord`). */
  revokedAtVersion?: number;
}

/** Where the check finds a tenant's signing keys. */
export interface KtSigningKeys {
  find(tenantId: string, signingKeyId: string): Promise<KtSigningKeyInfo | undefined>;
}

/** No signing keys at all: every statement is refused (until a signing-key store is wired in). */
export const NO_SIGNING_KEYS: KtSigningKeys = { find: async () => undefined };

/** A statement to check: the exact bytes the issuer signed (its `cardRef` included). */
export interface StatementToCheck {
  tenantId: string;
  statement: Uint8Array;
  signature: Uint8Array;
  signingKeyId: string;
}

/** Options of {@link checkStatement}. */
export interface StatementCheckOptions {
  /** `KT_MAX_BINDING_DAYS` (default 35). */
  maxBindingDays?: number | undefined;
  /** The signature engine; default Node's (OpenSSL), which answers as the pure one does. */
  engine?: SignatureEngine | undefined;
}

/** Which rule refused a statement: `statement` (bytes, members, window), `issuer`, `signer`, `signature`. */
export type StatementCheckFailure = {
  ok: false;
  check: "statement" | "issuer" | "signer" | "signature";
  reason: string;
};

/** The outcome of {@link checkStatement}. */
export type StatementCheck =
  | { ok: true; statement: Statement; signer: KtSigningKeyInfo; key: SigningKey }
  | StatementCheckFailure;

const fail = (check: StatementCheckFailure["check"], reason: string): StatementCheckFailure => ({
  ok: false,
  check,
  reason,
});

/** Checks a signed statement by the rules above; never throws for bad input. */
export async function checkStatement(
  input: StatementToCheck,
  keys: KtSigningKeys,
  options: StatementCheckOptions = {},
): Promise<StatementCheck> {
  const parsed = parseStatement(input.statement, {
    maxBindingDays: options.maxBindingDays ?? DEFAULT_MAX_BINDING_DAYS,
  });
  if (!parsed.ok) return fail("statement", parsed.reason);
  const statement = parsed.value;
  if (statement.issuer !== input.tenantId) return fail("issuer", "the statement's issuer is not this tenant");
  const signer = await keys.find(input.tenantId, input.signingKeyId);
  if (signer === undefined || signer.tenantId !== input.tenantId) {
    return fail("signer", `no signing key ${input.signingKeyId} of this tenant`);
  }
  const key = parseSigningKey(signer.spki);
  if (!key.ok || signingKeyIdOf(signer.spki) !== signer.signingKeyId) {
    return fail("signer", `signing key ${input.signingKeyId} is not a valid key`);
  }
  const chain = rootChainProblem(statement, signer);
  if (chain !== undefined) return fail("signer", chain);
  if (!verifySignature(key.key, input.statement, input.signature, options.engine ?? nodeEngine)) {
    return fail("signature", "the signature does not verify under the signing key");
  }
  return { ok: true, statement, signer, key: key.key };
}

/**
 * Why `signer` may not sign `statement`, if it may not: a revoked key signs nothing, except that a
 * root retired by a rotation or by its own revocation still counts for the tenant statements up to
 * the one that retired it (queued while it was the root; the sequence's last + 1 rule stops any
 * replay, and intake never takes a retired root's signature); a tenant
 * statement needs the tenant's root, current, except the root's own introduction (a `signing-key`
 * statement of role `root` naming the signer itself), which it signs while the operator has not yet
 * confirmed it; every other statement needs a current key.
 */
function rootChainProblem(statement: Statement, signer: KtSigningKeyInfo): string | undefined {
  if (signer.status === "revoked") {
    const retiredAt = signer.revokedAtVersion;
    const before =
      signer.role === "root" &&
      retiredAt !== undefined &&
      TENANT_STATEMENT_TYPES.includes(statement.type) &&
      statement.version <= retiredAt;
    return before ? undefined : `signing key ${signer.signingKeyId} is revoked`;
  }
  if (!TENANT_STATEMENT_TYPES.includes(statement.type)) {
    return signer.status === "current" ? undefined : `signing key ${signer.signingKeyId} is not current yet`;
  }
  if (signer.role !== "root") return `a ${statement.type} statement must be signed by the tenant's root`;
  const introducesItself =
    statement.type === "receipts.v1/signing-key" &&
    statement.role === "root" &&
    statement.signingKeyId === signer.signingKeyId;
  if (signer.status === "current" || introducesItself) return undefined;
  return `the root ${signer.signingKeyId} is not confirmed yet`;
}

/**
 * The order facts of a checked statement for its pending record (`KtOrder`): its sequence (the card's
 * keyed reference names a card's), type and version, and for a card the key it binds or revokes.
 */
export function orderOf(statement: Statement, card?: Pick<KtCard, "key">): KtOrder {
  if (statement.type === "receipts.v1/key-binding" || statement.type === "receipts.v1/key-revocation") {
    if (card === undefined) throw new TypeError("a card statement needs its card");
    const sequence = sequenceName.card(card.key);
    if (statement.type === "receipts.v1/key-revocation") {
      return { sequence, type: statement.type, version: statement.version, keyId: statement.keyId };
    }
    const { type, version, keyId, algorithm, spkiSha256, supersedes } = statement;
    return { sequence, type, version, keyId, algorithm, spkiSha256, supersedes };
  }
  const sequence =
    statement.type === "receipts.v1/escrow-key"
      ? sequenceName.escrow(statement.issuer)
      : sequenceName.tenant(statement.issuer);
  return { sequence, type: statement.type, version: statement.version };
}
