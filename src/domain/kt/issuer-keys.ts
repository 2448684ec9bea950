import { AppError } from "../../errors.js";
import { base64 } from "../../kt/bytes.js";
import { MAX_SIGNING_KEYS } from "../../kt/directory.js";
import { signingKeyIdOf } from "../../kt/signatures.js";
import { DEFAULT_MAX_BINDING_DAYS, type Statement } from "../../kt/statements.js";
import type { KtIssuerRecord, KtSigningKeyRecord } from "../../store/kt-issuers.js";
import type { KtPendingInput } from "../../store/kt-types.js";
import type { ApiKeyRecord, Store } from "../../store/types.js";
import { recordChange } from "../audit.js";
import type { DomainDeps } from "../deps.js";
import { type CallerInfo, INTERNAL_CALLER } from "../grants.js";
import {
  checkOrder,
  decodeSigned,
  expectMember,
  fieldError,
  parseSigningKeyField,
  signingKeyInfo,
  storeSigningKeys,
  type VerifiedStatement,
  verifySigned,
} from "./signed.js";
import { orderOf } from "./statement-check.js";

/**
 * Issuer signing keys (docs/key-transparency.md): the keys whose signatures make an issuer's key
 * bindings, escrow keys and settings count. A tenant's first key is its root: it signs nothing that
 * counts until the operator confirms it (after an out-of-band check with the bank); it may come with
 * its own introduction (a `receipts.v1/signing-key` statement of role `root` it signs itself), which
 * the log records. Every later key, and every revocation, is a statement signed by the confirmed
 * root: unsigned or badly signed is `invalid_signature`. Each change is audited with the key ids.
 *
 * Root rotation: the confirmed root signs a `receipts.v1/signing-key` statement of role `root`
 * introducing its successor, which is current at once; the old root is retired (revoked, with the
 * version of that statement) and signs nothing from then on. Root revocation: the confirmed root
 * signs its own `receipts.v1/signing-key-revocation`; the root and every signer are revoked, and
 * the tenant gets a new root only as it got its first (registration, then the operator's confirm).
 * While the tenant has a live root (pending or current), no key is registered without its statement,
 * so a recovery root for a tenant whose root is not revoked is refused; while it waits for its
 * recovery root, nothing falls back to the operator's word (`rootState`).
 */

/** A signing key as the API renders it. */
export interface SigningKeyView {
  signingKeyId: string;
  algorithm: KtSigningKeyRecord["algorithm"];
  publicKey: string;
  role: KtSigningKeyRecord["role"];
  status: KtSigningKeyRecord["status"];
  createdAt: Date;
  confirmedAt?: Date;
  revokedAt?: Date;
}

/** What `POST /api/v1/issuers/signing-keys` takes: the key, and (for every key after the root) the root's statement. */
export interface SigningKeyInput {
  publicKey: string;
  statement: string;
  signature: string;
}

function viewOf(key: KtSigningKeyRecord): SigningKeyView {
  const { spki, introduction: _, ...rest } = key;
  return { ...rest, publicKey: spki };
}

/** The tenant's live root (pending or current), if it has one: a retired or revoked root is not. */
export function rootOf(record: KtIssuerRecord | undefined): KtSigningKeyRecord | undefined {
  return record?.signingKeys.find((k) => k.role === "root" && k.status !== "revoked");
}

/**
 * Where a tenant stands: `current` with a confirmed root; `recovering` after its root was revoked and
 * before a new one is confirmed (its settings and BINs change only once a root signs again, never by
 * the operator's word); `none` before its first root is confirmed (the operator's word stands).
 */
export function rootState(record: KtIssuerRecord | undefined): "none" | "current" | "recovering" {
  if (rootOf(record)?.status === "current") return "current";
  const revoked = record?.signingKeys.some((k) => k.role === "root" && k.status === "revoked");
  return revoked === true ? "recovering" : "none";
}

/** `forbidden` for a change that needs the tenant's root while the tenant waits for its recovery root. */
export function refuseWhileRecovering(record: KtIssuerRecord | undefined): void {
  if (rootState(record) === "recovering") {
    throw new AppError(
      "forbidden",
      "The tenant's root is revoked: this change waits for its recovery root, confirmed by the operator.",
    );
  }
}

/** A tenant's record after a change: the next revision. */
export function nextIssuerRecord(
  record: KtIssuerRecord | undefined,
  tenantId: string,
  now: Date,
): KtIssuerRecord {
  return {
    tenantId,
    signingKeys: record?.signingKeys.map((k) => ({ ...k })) ?? [],
    requireBindings: record?.requireBindings ?? false,
    ...(record?.plaintextIntake === "refuse" ? { plaintextIntake: "refuse" as const } : {}),
    ...(record?.binMoves === undefined ? {} : { binMoves: record.binMoves.map((m) => ({ ...m })) }),
    revision: (record?.revision ?? 0) + 1,
    updatedAt: now,
  };
}

/** Writes a tenant's record with its statement or directory change; `conflict` when it moved or the log refused. */
export async function putIssuer(
  store: Pick<Store, "ktIssuers">,
  record: KtIssuerRecord,
  kt: readonly KtPendingInput[],
): Promise<void> {
  const outcome = await store.ktIssuers.put(record, kt);
  if (outcome.kind === "moved") {
    throw new AppError("conflict", "The tenant's signing keys changed meanwhile: read them and try again.");
  }
  if (outcome.kind === "log_refused") {
    throw new AppError(
      "conflict",
      `The statement does not follow the tenant's statements: ${outcome.reason}.`,
    );
  }
}

/**
 * Checks a tenant statement (`field` is where the request carries it) signed by the tenant's root:
 * unsigned is `invalid_signature`, the rest as `verifySigned` says, and its version must be the
 * tenant sequence's last + 1.
 */
export async function verifyRootStatement(
  store: Store,
  tenantId: string,
  input: { statement: string; signature: string },
  root: KtSigningKeyRecord | undefined,
  field = "statement",
): Promise<VerifiedStatement> {
  if (input.statement === "" || input.signature === "") {
    throw new AppError(
      "invalid_signature",
      "This change must carry a statement signed by the tenant's root.",
      {
        violations: [
          { field, description: "is required: a statement signed by the tenant's confirmed root" },
        ],
      },
    );
  }
  if (root === undefined || root.status !== "current") {
    throw new AppError("invalid_signature", "The tenant has no confirmed root to sign this change.");
  }
  const decoded = decodeSigned({ ...input, signingKeyId: root.signingKeyId }, field);
  const checked = await verifySigned(
    tenantId,
    decoded,
    storeSigningKeys(store),
    field,
    DEFAULT_MAX_BINDING_DAYS,
  );
  const order = orderOf(checked.statement);
  checkOrder(await store.ktLog.sequenceState(order.sequence), order, `${field}.version`);
  return checked;
}

/**
 * Adds a signing key of the caller's tenant: its root (pending) when it has no live root (its first,
 * or a recovery root after its root was revoked), else the key the confirmed root's
 * `receipts.v1/signing-key` statement introduces, current at once: a signer, or (role `root`) the
 * root's successor, which retires the old root.
 */
export async function registerIssuerSigningKey(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: SigningKeyInput,
  caller: CallerInfo = INTERNAL_CALLER,
): Promise<SigningKeyView> {
  const tenantId = principal.tenantId;
  const { spki, algorithm } = parseSigningKeyField(input.publicKey, "publicKey");
  const signingKeyId = signingKeyIdOf(spki);
  const holder = await deps.store.ktIssuers.tenantOfSigningKey(signingKeyId);
  if (holder !== undefined) throw new AppError("conflict", "This signing key is already registered.");
  const record = await deps.store.ktIssuers.get(tenantId);
  // Every key stays listed (a rotation retires its root, it does not delete it), and a snapshot
  // with more keys for one issuer than verifiers parse would stop every merchant's verification.
  if ((record?.signingKeys.length ?? 0) >= MAX_SIGNING_KEYS) {
    throw new AppError(
      "conflict",
      `The tenant has ${MAX_SIGNING_KEYS} signing keys, the most the directory lists.`,
    );
  }
  const root = rootOf(record);
  const now = deps.clock.now();
  const key: KtSigningKeyRecord = {
    signingKeyId,
    algorithm,
    spki: base64(spki),
    role: "root",
    status: root === undefined ? "pending" : "current",
    createdAt: now,
  };
  const checked =
    root === undefined
      ? await rootIntroduction(deps, tenantId, input, key)
      : await verifyRootStatement(deps.store, tenantId, input, root);
  const introduced = checked?.statement as Record<string, unknown> | undefined;
  const rotation = root !== undefined && introduced?.role === "root";
  if (root !== undefined && !rotation) key.role = "signer";
  if (checked !== undefined) expectIntroduces(checked.statement, key);
  const updated = nextIssuerRecord(record, tenantId, now);
  if (rotation) rotate(updated, { root, key, now }, checked as VerifiedStatement);
  updated.signingKeys.push(key);
  const kt =
    checked === undefined
      ? [deps.kt.pendingDirectoryChange("kt.root.added", tenantId)]
      : [pendingOf(deps, tenantId, checked)];
  await putIssuer(deps.store, updated, kt);
  deps.kt.notify();
  await recordChange(deps, {
    at: now,
    action: rotation ? "kt.root.rotated" : "kt.signing_key.added",
    tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    keyId: signingKeyId,
    ...(root === undefined ? {} : { previousKeyId: root.signingKeyId }),
    subject: `${key.role} ${key.status}${root === undefined && rootState(record) === "recovering" ? " (recovery)" : ""}`,
  });
  return viewOf(key);
}

/**
 * A rotation's change to the tenant's record: the old root retired at the rotation's version, and the
 * new root keeps the statement that introduced it (answers carry it as `rootRotation`).
 */
function rotate(
  record: KtIssuerRecord,
  change: { root: KtSigningKeyRecord; key: KtSigningKeyRecord; now: Date },
  rotation: VerifiedStatement,
): void {
  retire(record, change.root.signingKeyId, change.now, rotation.statement.version);
  change.key.introduction = {
    statement: base64(rotation.bytes),
    signature: base64(rotation.signature),
    signingKeyId: rotation.signingKeyId,
  };
}

/** Marks key `signingKeyId` of `record` revoked at `now`; a root keeps the version that retired it. */
function retire(record: KtIssuerRecord, signingKeyId: string, now: Date, version?: number): void {
  const key = record.signingKeys.find((k) => k.signingKeyId === signingKeyId) as KtSigningKeyRecord;
  key.status = "revoked";
  key.revokedAt = now;
  if (version !== undefined) key.revokedAtVersion = version;
}

/** The root's optional self-signed introduction, checked with the candidate root as its signer. */
async function rootIntroduction(
  deps: DomainDeps,
  tenantId: string,
  input: SigningKeyInput,
  key: KtSigningKeyRecord,
): Promise<VerifiedStatement | undefined> {
  if (input.statement === "" && input.signature === "") return undefined;
  const decoded = decodeSigned({ ...input, signingKeyId: key.signingKeyId }, "statement");
  const candidate: KtIssuerRecord = {
    tenantId,
    signingKeys: [key],
    requireBindings: false,
    revision: 0,
    updatedAt: key.createdAt,
  };
  const keys = { find: async (_tenant: string, id: string) => signingKeyInfo(candidate, id) };
  const checked = await verifySigned(tenantId, decoded, keys, "statement", DEFAULT_MAX_BINDING_DAYS);
  const order = orderOf(checked.statement);
  checkOrder(await deps.store.ktLog.sequenceState(order.sequence), order, "statement.version");
  return checked;
}

/** A `receipts.v1/signing-key` statement introducing exactly `key`, or `invalid_request` naming the member. */
function expectIntroduces(statement: Statement, key: KtSigningKeyRecord): void {
  expectMember("statement.type", statement.type, "receipts.v1/signing-key", '"receipts.v1/signing-key"');
  const s = statement as Statement & Record<string, unknown>;
  expectMember("statement.signingKeyId", s.signingKeyId, key.signingKeyId, "the signingKeyId of publicKey");
  expectMember("statement.spki", s.spki, key.spki, "publicKey");
  expectMember("statement.algorithm", s.algorithm, key.algorithm, `${key.algorithm}, publicKey's`);
  expectMember("statement.role", s.role, key.role, `"${key.role}"`);
}

/** The pending record of a checked statement about no card. */
function pendingOf(deps: DomainDeps, tenantId: string, checked: VerifiedStatement): KtPendingInput {
  return deps.kt.pendingStatement({
    tenantId,
    statement: checked.statement,
    bytes: checked.bytes,
    signature: checked.signature,
    signingKeyId: checked.signingKeyId,
  });
}

/** The caller's signing keys (the root first) and its `requireBindings`. */
export async function listIssuerSigningKeys(
  deps: DomainDeps,
  principal: ApiKeyRecord,
): Promise<{ signingKeys: SigningKeyView[]; requireBindings: boolean }> {
  const record = await deps.store.ktIssuers.get(principal.tenantId);
  return {
    signingKeys: (record?.signingKeys ?? []).map(viewOf),
    requireBindings: record?.requireBindings ?? false,
  };
}

/**
 * Revokes a signing key of the caller's tenant with the root's `receipts.v1/signing-key-revocation`
 * statement: a signer, or the root itself (signed by itself, when it is compromised), which revokes
 * every signer with it: whatever the revoked root vouched for stops counting, and the tenant waits
 * for a recovery root (registered, then confirmed by the operator after an out-of-band check).
 */
export async function revokeIssuerSigningKey(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { signingKeyId: string; statement: string; signature: string },
  caller: CallerInfo = INTERNAL_CALLER,
): Promise<SigningKeyView> {
  const tenantId = principal.tenantId;
  const record = await deps.store.ktIssuers.get(tenantId);
  const key = record?.signingKeys.find((k) => k.signingKeyId === input.signingKeyId);
  if (record === undefined || key === undefined) {
    throw new AppError("not_found", "No signing key of this tenant has this id.");
  }
  if (key.status === "revoked") return viewOf(key);
  if (key.role === "root" && key.status !== "current")
    throw fieldError("signingKeyId", "is a root the operator has not confirmed: it signs nothing yet");
  const checked = await verifyRootStatement(deps.store, tenantId, input, rootOf(record));
  expectMember(
    "statement.type",
    checked.statement.type,
    "receipts.v1/signing-key-revocation",
    '"receipts.v1/signing-key-revocation"',
  );
  expectMember(
    "statement.signingKeyId",
    (checked.statement as Record<string, unknown>).signingKeyId,
    key.signingKeyId,
    "signingKeyId",
  );
  const now = deps.clock.now();
  const updated = nextIssuerRecord(record, tenantId, now);
  const isRoot = key.role === "root";
  retire(updated, key.signingKeyId, now, isRoot ? checked.statement.version : undefined);
  const signers = isRoot
    ? updated.signingKeys.filter((k) => k.role === "signer" && k.status !== "revoked")
    : [];
  for (const signer of signers) retire(updated, signer.signingKeyId, now);
  await putIssuer(deps.store, updated, [pendingOf(deps, tenantId, checked)]);
  deps.kt.notify();
  await recordChange(deps, {
    at: now,
    action: isRoot ? "kt.root.revoked" : "kt.signing_key.revoked",
    tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    previousKeyId: key.signingKeyId,
    subject: isRoot ? `root ${key.signingKeyId} and ${signers.length} signer(s)` : key.signingKeyId,
  });
  return viewOf(updated.signingKeys.find((k) => k.signingKeyId === key.signingKeyId) as KtSigningKeyRecord);
}
