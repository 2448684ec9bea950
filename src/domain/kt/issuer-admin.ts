import { AppError, Violations } from "../../errors.js";
import type { KtSigningKeyRecord } from "../../store/kt-issuers.js";
import type { KtPendingInput } from "../../store/kt-types.js";
import { audit, checkId, type OperatorContext } from "../admin.js";
import { directoryChange } from "./directory-change.js";
import { nextIssuerRecord, putIssuer, rootOf, verifyRootStatement } from "./issuer-keys.js";
import { pendingStatementOf } from "./service.js";
import { expectMember } from "./signed.js";

/**
 * The operator's part of the key directory (docs/key-transparency.md): confirming a tenant's root
 * after an out-of-band check with the bank, and a tenant's `requireBindings`, which is the operator's
 * word only while the tenant has no confirmed root; after that it takes the root's
 * `receipts.v1/require-bindings` statement, which the operator carries. Both are audited.
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
  const root = rootOf(record);
  if (root === undefined || root.signingKeyId !== signingKeyId) {
    throw new AppError("not_found", "This tenant has no root signing key of this id.");
  }
  if (root.status === "current") return viewOf(tenant, root);
  if (root.status === "revoked") throw new AppError("conflict", "This root is revoked.");
  const updated = nextIssuerRecord(record, tenant, ctx.now);
  const confirmed = rootOf(updated) as KtSigningKeyRecord;
  confirmed.status = "current";
  confirmed.confirmedAt = ctx.now;
  await putIssuer(ctx.store, updated, [directoryChange("kt.root.confirmed", ctx.now, tenant)]);
  await audit(ctx, "admin.kt.root_confirmed", tenant, `root ${signingKeyId} confirmed`, {
    keyId: signingKeyId,
  });
  return viewOf(tenant, confirmed);
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
  const input = (typeof body === "object" && body !== null && !Array.isArray(body) ? body : {}) as Record<
    string,
    unknown
  >;
  const v = new Violations();
  checkId(v, "tenant", tenant);
  if (typeof input.requireBindings !== "boolean") v.add("requireBindings", "must be true or false");
  for (const name of ["statement", "signature"]) {
    if (input[name] !== undefined && typeof input[name] !== "string") v.add(name, "must be a base64 string");
  }
  v.throwIfAny();
  const requireBindings = input.requireBindings as boolean;
  const record = await ctx.store.ktIssuers.get(tenant);
  const root = rootOf(record);
  let kt: KtPendingInput;
  if (root?.status === "current") {
    const signed = {
      statement: (input.statement as string) ?? "",
      signature: (input.signature as string) ?? "",
    };
    const checked = await verifyRootStatement(ctx.store, tenant, signed, root);
    const type = '"receipts.v1/require-bindings"';
    expectMember("statement.type", checked.statement.type, "receipts.v1/require-bindings", type);
    expectMember(
      "statement.requireBindings",
      (checked.statement as Record<string, unknown>).requireBindings,
      requireBindings,
      "requireBindings",
    );
    kt = pendingStatementOf({ tenantId: tenant, ...checked }, ctx.now);
  } else {
    kt = directoryChange("kt.require_bindings", ctx.now, tenant);
  }
  const updated = nextIssuerRecord(record, tenant, ctx.now);
  updated.requireBindings = requireBindings;
  await putIssuer(ctx.store, updated, [kt]);
  await audit(
    ctx,
    "admin.kt.require_bindings",
    tenant,
    `requireBindings before: ${record?.requireBindings ?? false}; after: ${requireBindings}`,
  );
  return { tenant, requireBindings };
}
