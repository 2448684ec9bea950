import { AppError, Violations } from "../../errors.js";
import { base64, fromBase64Strict } from "../../kt/bytes.js";
import { parseSigningKey } from "../../kt/signatures.js";
import { SIGNING_KEY_ID, type Statement } from "../../kt/statements.js";
import type { KtIssuerRecord } from "../../store/kt-issuers.js";
import { advanceSequence } from "../../store/kt-sequence.js";
import type { KtOrder, KtSequenceState } from "../../store/kt-types.js";
import type { Store } from "../../store/types.js";
import { checkStatement, type KtSigningKeyInfo, type KtSigningKeys } from "./statement-check.js";

/**
 * Signed statements as requests carry them (`binding` of register and escrow keys, the statement of a
 * signing key, a revocation, `requireBindings`): decoded, then checked by the one statement check
 * (`statement-check.ts`, which the sequencer runs again before it appends), each refusal in the
 * envelope: bytes that are not a statement of the rules, or another tenant's, are `invalid_request`
 * naming the field; a signing key that is not a current key of the caller's tenant (unknown, another
 * tenant's, a root the operator has not confirmed, revoked) or a signature that does not verify is
 * `invalid_signature`.
 */

/** A signed statement as a request carries it: base64 of its bytes and of its signature. */
export interface SignedInput {
  statement: string;
  signature: string;
  signingKeyId: string;
}

/** A statement that passed the check: what the pending record is made from. */
export interface VerifiedStatement {
  statement: Statement;
  bytes: Uint8Array;
  signature: Uint8Array;
  signingKeyId: string;
  signer: KtSigningKeyInfo;
}

/** The longest statement a request may carry, in base64 characters (a binding is about 400 bytes). */
const MAX_STATEMENT_BASE64 = 4096;

/** The signing keys the stores hold, as the statement check and the sequencer look them up. */
export function storeSigningKeys(store: Pick<Store, "ktIssuers">): KtSigningKeys {
  return {
    async find(tenantId, signingKeyId) {
      const record = await store.ktIssuers.get(tenantId);
      return signingKeyInfo(record, signingKeyId);
    },
  };
}

/** The statement check's view of one signing key of `record`. */
export function signingKeyInfo(
  record: KtIssuerRecord | undefined,
  signingKeyId: string,
): KtSigningKeyInfo | undefined {
  const key = record?.signingKeys.find((k) => k.signingKeyId === signingKeyId);
  if (record === undefined || key === undefined) return undefined;
  const spki = fromBase64Strict(key.spki);
  if (spki === undefined) return undefined;
  return {
    tenantId: record.tenantId,
    signingKeyId,
    spki,
    role: key.role,
    status: key.status,
    ...(key.revokedAtVersion === undefined ? {} : { revokedAtVersion: key.revokedAtVersion }),
  };
}

/**
 * Decodes `input` (the request's field `field`): `invalid_request` naming each bad member. The
 * statement is read as bytes: its canonical form is checked by the statement check, never repaired.
 */
export function decodeSigned(
  input: SignedInput,
  field: string,
): { bytes: Uint8Array; signature: Uint8Array; signingKeyId: string } {
  const v = new Violations();
  const bytes =
    input.statement.length <= MAX_STATEMENT_BASE64 ? fromBase64Strict(input.statement) : undefined;
  if (input.statement === "") v.add(`${field}.statement`, "is required");
  else if (bytes === undefined || bytes.length === 0) {
    v.add(`${field}.statement`, `must be base64 of at most ${(MAX_STATEMENT_BASE64 / 4) * 3} bytes`);
  }
  const signature = fromBase64Strict(input.signature, 64);
  if (input.signature === "") v.add(`${field}.signature`, "is required");
  else if (signature === undefined) v.add(`${field}.signature`, "must be base64 of 64 bytes");
  if (input.signingKeyId === "") v.add(`${field}.signingKeyId`, "is required");
  else if (SIGNING_KEY_ID(input.signingKeyId) !== undefined) {
    v.add(`${field}.signingKeyId`, "must be sk_ and 32 hexadecimal digits");
  }
  v.throwIfAny();
  return { bytes: bytes as Uint8Array, signature: signature as Uint8Array, signingKeyId: input.signingKeyId };
}

/**
 * Checks a decoded statement of tenant `tenantId` against `keys` (by default the stores'): the rules
 * of its type, the issuer, the signing key and the signature. Throws as the file's comment says.
 */
export async function verifySigned(
  tenantId: string,
  decoded: { bytes: Uint8Array; signature: Uint8Array; signingKeyId: string },
  keys: KtSigningKeys,
  field: string,
  maxBindingDays: number,
): Promise<VerifiedStatement> {
  const check = await checkStatement({ tenantId, statement: decoded.bytes, ...decoded }, keys, {
    maxBindingDays,
  });
  if (check.ok) return { ...decoded, statement: check.statement, signer: check.signer };
  if (check.check === "statement" || check.check === "issuer") {
    throw fieldError(
      `${field}.statement`,
      check.check === "issuer" ? "issuer must be this tenant" : check.reason,
    );
  }
  throw new AppError(
    "invalid_signature",
    check.check === "signer"
      ? "The statement's signing key is not a current signing key of this tenant."
      : "The statement's signature does not verify under its signing key.",
    {
      violations: [
        {
          field: `${field}.${check.check === "signer" ? "signingKeyId" : "signature"}`,
          description: check.reason,
        },
      ],
    },
  );
}

/** `invalid_request` naming one field. */
export function fieldError(field: string, description: string): AppError {
  return new AppError("invalid_request", "The request is invalid.", { violations: [{ field, description }] });
}

/**
 * Checks that a statement follows its sequence as the intake state says now (the store checks again
 * in the atomic step of the write): `invalid_request` naming `field` with the rule it breaks.
 */
export function checkOrder(state: KtSequenceState | undefined, order: KtOrder, field: string): void {
  const next = advanceSequence(state, order);
  if (!next.ok) throw fieldError(field, next.reason);
}

/** Whether `a` and `b` are one member's value: `invalid_request` naming `field` when they differ. */
export function expectMember(field: string, actual: unknown, expected: unknown, what: string): void {
  if (actual !== expected) throw fieldError(field, `must be ${what}`);
}

/** The base64 SPKI of a signing key the request gives (base64 DER), checked by our own parser first. */
export function parseSigningKeyField(
  value: string,
  field: string,
): { spki: Uint8Array; algorithm: "Ed25519" | "ECDSA-P256-SHA256" } {
  if (value === "") throw fieldError(field, "is required");
  const spki = value.length <= 400 ? fromBase64Strict(value) : undefined;
  if (spki === undefined) throw fieldError(field, "must be base64 of a SubjectPublicKeyInfo (DER)");
  const parsed = parseSigningKey(spki);
  if (!parsed.ok) throw fieldError(field, `is not an Ed25519 or ECDSA P-256 key: ${parsed.reason}`);
  return { spki, algorithm: parsed.key.algorithm };
}

/** Base64 of bytes (re-exported so callers need one import for a statement's members). */
export const toBase64 = base64;
