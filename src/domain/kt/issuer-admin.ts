import { AppError, Violations } from "../../errors.js";
import { parseDirectory } from "../../kt/directory.js";
import { formatTime, type StatementType } from "../../kt/statements.js";
import type { KtIssuerRecord, KtSigningKeyRecord, PlaintextIntake } from "../../store/kt-issuers.js";
import type { KtPendingInput } from "../../store/kt-types.js";
import { audit, checkId, type OperatorContext } from "../admin.js";
import { directoryChange } from "./directory-change.js";
import {
  nextIssuerRecord,
  putIssuer,
  refuseWhileRecovering,
  rootOf,
  rootState,
  verifyRootStatement,
} from "./issuer-keys.js";
import { pendingStatementOf } from "./service.js";
import { expectMember } from "./signed.js";

/**
 * The operator's part of the key directory (docs/key-transparency.md): confirming a tenant's root
 * after an out-of-band check with the bank, and a tenant's `requireBindings`, which is the operator's
 * word only while the tenant has no confirmed root; after that it takes the root's
 * `receipts.v1/require-bindings` statement, which the operator carries; `plaintextIntake` likewise
 * (`receipts.v1/plaintext-intake`). Each is audited.
 */

/** A signing key as the operator sees it. */
export interface OperatorSigningKeyView {
  tenant: string;
  signingKeyId: string;
  algorithm: string;
  role: string;
  status: string;
  confirmedAt?: string;
}

function viewOf(tenant: string, key: KtSigningKeyRecord): OperatorSigningKeyView {
  const view: OperatorSigningKeyView = {
    tenant,
    signingKeyId: key.signingKeyId,
    algorithm: key.algorithm,
    role: key.role,
    status: key.status,
  };
  if (key.confirmedAt !== undefined) view.confirmedAt = key.confirmedAt.toISOString();
  return view;
}

/**
 * Confirms tenant `tenant`'s pending root `signingKeyId`: from then on it signs the tenant's
 * statements, and the key log's next directory snapshot lists it as current. Confirming it again
 * answers it unchanged; any other key is `not_found` (a signer needs no confirmation).
 */
export async function confirmRoot(
  ctx: OperatorContext,
  tenant: string,
  signingKeyId: string,
): Promise<OperatorSigningKeyView> {
  const v = new Violations();
  checkId(v, "tenant", tenant);
  checkId(v, "signingKeyId", signingKeyId);
  v.throwIfAny();
  const record = await ctx.store.ktIssuers.get(tenant);
  const root = record?.signingKeys.find((k) => k.role === "root" && k.signingKeyId === signingKeyId);
  if (record === undefined || root === undefined) {
    throw new AppError("not_found", "This tenant has no root signing key of this id.");
  }
  if (root.status === "current") return viewOf(tenant, root);
  if (root.status === "revoked") throw new AppError("conflict", "This root is revoked.");
  const live = record.signingKeys.find((k) => k.role === "root" && k.status === "current");
  if (live !== undefined) {
    throw new AppError(
      "conflict",
      "This tenant's root is live: a new root is confirmed only after the tenant's root revoked itself.",
    );
  }
  const recovery = rootState(record) === "recovering";
  if (recovery) await expectRevocationLogged(ctx, record);
  const updated = nextIssuerRecord(record, tenant, ctx.now);
  const confirmed = updated.signingKeys.find((k) => k.signingKeyId === signingKeyId) as KtSigningKeyRecord;
  confirmed.status = "current";
  confirmed.confirmedAt = ctx.now;
  await putIssuer(ctx.store, updated, [directoryChange("kt.root.confirmed", ctx.now, tenant)]);
  const what = recovery ? "recovery root" : "root";
  await audit(ctx, "admin.kt.root_confirmed", tenant, `${what} ${signingKeyId} confirmed`, {
    keyId: signingKeyId,
  });
  return viewOf(tenant, confirmed);
}

/**
 * A recovery root is confirmed only once the key log's latest directory snapshot lists every retired
 * root of the tenant as revoked, and was issued in an earlier second than now: the snapshot that first
 * lists the recovery root as current is then later, so its `effectiveFrom` differs from the revoked
 * roots' (a rotation shows both changes in one snapshot). That difference is how a merchant's
 * verifier tells a recovery root from a rotation's successor: a root that revoked itself (lost or
 * stolen) never vouches for the root after it (`kt/root-delay.ts`). Before, `conflict`: try again
 * once the log has caught up (seconds).
 */
async function expectRevocationLogged(ctx: OperatorContext, record: KtIssuerRecord): Promise<void> {
  const head = await ctx.store.ktLog.head();
  const latest = await ctx.store.ktLog.directoryBefore(head.size);
  const parsed = latest === undefined ? undefined : parseDirectory(latest.json);
  const listed =
    parsed?.ok === true ? parsed.value.issuers.find((i) => i.issuer === record.tenantId) : undefined;
  const shown = record.signingKeys
    .filter((k) => k.role === "root" && k.status === "revoked")
    .every((k) =>
      listed?.signingKeys.some((l) => l.signingKeyId === k.signingKeyId && l.status === "revoked"),
    );
  const earlier =
    latest !== undefined && formatTime(latest.issuedAt.getTime()) < formatTime(ctx.now.getTime());
  if (!shown || !earlier) {
    throw new AppError(
      "conflict",
      "The key log has not yet published the revocation of this tenant's root: confirm the recovery root again in a few seconds.",
    );
  }
}

/**
 * Sets tenant `tenant`'s `requireBindings` from `{requireBindings, statement?, signature?}`: with a
 * confirmed root, `statement` must be the root's `receipts.v1/require-bindings` statement saying the
 * same (`invalid_signature` without one); before, the operator's word is enough.
 */
export async function setRequireBindings(
  ctx: OperatorContext,
  tenant: string,
  body: unknown,
): Promise<{ tenant: string; requireBindings: boolean }> {
  const requireBindings = await setTenantSetting(ctx, tenant, body, {
    member: "requireBindings",
    type: "receipts.v1/require-bindings",
    reason: "kt.require_bindings",
    action: "admin.kt.require_bindings",
    values: [true, false],
    read: (record) => record?.requireBindings ?? false,
    write: (record, value) => {
      record.requireBindings = value as boolean;
    },
  });
  return { tenant, requireBindings: requireBindings as boolean };
}

/**
 * Sets tenant `tenant`'s `plaintextIntake` from `{plaintextIntake, statement?, signature?}`
 * (`"refuse"` or `"accept"`): with `"refuse"` the paths where the service would see a receipt in the
 * clear (encrypt, create and refund with receipt fields) are `forbidden` for the cards the tenant's
 * receipts go to, and merchants seal on their side. With a confirmed root, `statement` must be the
 * root's `receipts.v1/plaintext-intake` statement saying the same; before, the operator's word is enough.
 */
export async function setPlaintextIntake(
  ctx: OperatorContext,
  tenant: string,
  body: unknown,
): Promise<{ tenant: string; plaintextIntake: PlaintextIntake }> {
  const plaintextIntake = await setTenantSetting(ctx, tenant, body, {
    member: "plaintextIntake",
    type: "receipts.v1/plaintext-intake",
    reason: "kt.plaintext_intake",
    action: "admin.kt.plaintext_intake",
    values: ["refuse", "accept"],
    read: (record) => record?.plaintextIntake ?? "accept",
    write: (record, value) => {
      if (value === "refuse") record.plaintextIntake = "refuse";
      else delete record.plaintextIntake;
    },
  });
  return { tenant, plaintextIntake: plaintextIntake as PlaintextIntake };
}

/** One tenant setting the root signs: its member, statement type, values, and where the record keeps it. */
interface TenantSetting {
  member: string;
  type: StatementType;
  /** The directory change's reason, before the tenant has a confirmed root. */
  reason: string;
  action: string;
  values: readonly (string | boolean)[];
  read: (record: KtIssuerRecord | undefined) => string | boolean;
  write: (record: KtIssuerRecord, value: string | boolean) => void;
}

/**
 * Sets one tenant setting from `{<member>, statement?, signature?}`: with a confirmed root, the
 * root's statement of `setting.type` saying the same value, version last + 1 (`invalid_signature`
 * without one); before, the operator's word, recorded as a directory change. Audited, before and after.
 */
async function setTenantSetting(
  ctx: OperatorContext,
  tenant: string,
  body: unknown,
  setting: TenantSetting,
): Promise<string | boolean> {
  const input = (typeof body === "object" && body !== null && !Array.isArray(body) ? body : {}) as Record<
    string,
    unknown
  >;
  const v = new Violations();
  checkId(v, "tenant", tenant);
  const value = input[setting.member];
  if (!setting.values.includes(value as string | boolean)) {
    v.add(setting.member, `must be ${setting.values.map((x) => JSON.stringify(x)).join(" or ")}`);
  }
  for (const name of ["statement", "signature"]) {
    if (input[name] !== undefined && typeof input[name] !== "string") v.add(name, "must be a base64 string");
  }
  v.throwIfAny();
  const chosen = value as string | boolean;
  const record = await ctx.store.ktIssuers.get(tenant);
  refuseWhileRecovering(record);
  const root = rootOf(record);
  let kt: KtPendingInput;
  if (root?.status === "current") {
    const signed = {
      statement: (input.statement as string) ?? "",
      signature: (input.signature as string) ?? "",
    };
    const checked = await verifyRootStatement(ctx.store, tenant, signed, root);
    expectMember("statement.type", checked.statement.type, setting.type, `"${setting.type}"`);
    const said = (checked.statement as Record<string, unknown>)[setting.member];
    expectMember(`statement.${setting.member}`, said, chosen, setting.member);
    kt = pendingStatementOf({ tenantId: tenant, ...checked }, ctx.now);
  } else {
    kt = directoryChange(setting.reason, ctx.now, tenant);
  }
  const updated = nextIssuerRecord(record, tenant, ctx.now);
  setting.write(updated, chosen);
  await putIssuer(ctx.store, updated, [kt]);
  const before = setting.read(record);
  await audit(ctx, setting.action, tenant, `${setting.member} before: ${before}; after: ${chosen}`);
  return chosen;
}
