import { AppError, Violations } from "../../errors.js";
import { randomId } from "../../ids.js";
import type { KtAuditorRecord } from "../../store/kt-types.js";
import type { OperatorContext } from "../admin.js";
import { auditorTokenHash } from "./reads.js";

/**
 * The auditors an operator registers to read the key log's leaf data (`GET /kt/v1/entries`,
 * docs/key-transparency.md): a monitor run by someone other than an issuer (a regulator, a researcher, a
 * bank's second line). Each gets a token, shown once and stored as its SHA-256; every change is audited.
 */

/** An auditor as the operator sees it; `token` only when it is created. */
export interface AuditorView {
  auditorId: string;
  name: string;
  token?: string;
  createdAt: string;
  revokedAt?: string;
}

function viewOf(record: KtAuditorRecord, token?: string): AuditorView {
  const view: AuditorView = {
    auditorId: record.id,
    name: record.name,
    createdAt: record.createdAt.toISOString(),
  };
  if (token !== undefined) view.token = token;
  if (record.revokedAt !== undefined) view.revokedAt = record.revokedAt.toISOString();
  return view;
}

async function audit(ctx: OperatorContext, action: string, auditorId: string): Promise<void> {
  await ctx.store.audit.append({
    at: ctx.now,
    action,
    tenantId: `auditor:${auditorId}`,
    requestId: ctx.requestId,
    sourceIp: ctx.sourceIp,
    subject: auditorId,
  });
}

/** Registers an auditor from `{name}`; its token is in the answer once. */
export async function createAuditor(ctx: OperatorContext, body: unknown): Promise<AuditorView> {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new AppError("invalid_request", "The body must be a JSON object.");
  }
  const input = body as Record<string, unknown>;
  const v = new Violations();
  for (const field of Object.keys(input)) if (field !== "name") v.add(field, "is not a known field");
  if (typeof input.name !== "string" || input.name.trim() === "" || input.name.length > 200) {
    v.add("name", "must be text of 1 to 200 characters");
  }
  v.throwIfAny();
  const token = randomId("kta", 32);
  const record: KtAuditorRecord = {
    id: randomId("aud", 8),
    name: input.name as string,
    tokenHash: auditorTokenHash(token),
    createdAt: ctx.now,
  };
  await ctx.store.ktLog.insertAuditor(record);
  await audit(ctx, "admin.kt.auditor.created", record.id);
  return viewOf(record, token);
}

export async function listAuditors(
  ctx: Pick<OperatorContext, "store">,
): Promise<{ auditors: AuditorView[] }> {
  return { auditors: (await ctx.store.ktLog.listAuditors()).map((a) => viewOf(a)) };
}

/** Revokes an auditor; `not_found` for an unknown id. */
export async function revokeAuditor(ctx: OperatorContext, auditorId: string): Promise<AuditorView> {
  if (!(await ctx.store.ktLog.revokeAuditor(auditorId, ctx.now)))
    throw new AppError("not_found", "No such auditor.");
  await audit(ctx, "admin.kt.auditor.revoked", auditorId);
  const record = (await ctx.store.ktLog.listAuditors()).find((a) => a.id === auditorId) as KtAuditorRecord;
  return viewOf(record);
}
