import { generateKeyPairSync, randomUUID } from "node:crypto";
import { expect } from "vitest";
import {
  generateIssuerSigner,
  type IssuerSigner,
  signStatement,
  statementOf,
} from "../../src/client/key-binding.js";
import { base64, utf8 } from "../../src/kt/bytes.js";
import { formatTime } from "../../src/kt/statements.js";
import { post, type TestService } from "./harness.js";

/**
 * An issuer's signing set-up over the service's own API, as the key directory's tests do it: operator
 * calls, a tenant with an issuer API key, a root registered (and confirmed by the operator), a signer
 * the root endorses, a device key.
 */

/** An operator answer's body. */
export interface AdminBody {
  data?: Record<string, unknown>;
  error?: { code: string; message?: string };
}

/** An operator call: its status and parsed body (`{}` when empty). */
export type OperatorCall = (
  method: string,
  path: string,
  body?: unknown,
) => Promise<{ status: number; body: AdminBody }>;

/** An operator answer's body, for assertions that index freely into its data. */
// biome-ignore lint/suspicious/noExplicitAny: test assertions index freely into response data
export type LooseAdminBody = { data?: any; error?: any };

/** Operator calls to the service at `baseUrl` with its ADMIN_TOKEN `token`. */
export function operatorCalls<Body = AdminBody>(
  baseUrl: string,
  token: string,
): (method: string, path: string, body?: unknown) => Promise<{ status: number; body: Body }> {
  return async (method, path, body) => {
    const res = await fetch(`${baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, body: (text === "" ? {} : JSON.parse(text)) as Body };
  };
}

/** Operator calls that must each answer 200 (set-up steps). */
export function operatorSteps(
  baseUrl: string,
  token: string,
): (method: string, path: string, body?: unknown) => Promise<void> {
  const call = operatorCalls(baseUrl, token);
  return async (method, path, body) => {
    const res = await call(method, path, body);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
  };
}

/** Makes `bins` the tenant's BINs in the store, with the directory change the log snapshots. */
export async function ownBins(svc: TestService, tenant: string, bins: string[]): Promise<void> {
  const change = svc.app.domain.kt.pendingDirectoryChange("bins.set", tenant);
  expect((await svc.store.bins.set(tenant, bins, new Date(), [change])).kind).toBe("set");
}

/**
 * Waits until nothing is pending and the newest checkpoint covers the whole (non-empty) log, with
 * `cosignatures` witnesses' cosignatures on it (a change queued while a round ran goes into the next).
 */
export async function untilSequenced(svc: TestService, cosignatures = 0): Promise<void> {
  for (let i = 0; i < 400; i++) {
    const pending = await svc.store.ktLog.pending(1);
    const head = await svc.store.ktLog.head();
    const latest = await svc.store.ktLog.latestCheckpoint();
    const cosigned = latest !== undefined && Object.keys(latest.cosignatures).length >= cosignatures;
    if (pending.length === 0 && head.size > 0 && latest?.size === head.size && cosigned) return;
    svc.app.domain.kt.notify();
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error("the log did not catch up");
}

/** An issuer tenant and its API key. */
export interface Bank {
  id: string;
  key: string;
}

let tenants = 0;

/** A fresh issuer tenant `<prefix>-<n>` with a standard-tier issuer API key. */
export async function newIssuer(svc: TestService, prefix: string): Promise<Bank> {
  tenants += 1;
  const id = `${prefix}-${tenants}`;
  return { id, key: await svc.newKey({ role: "issuer", tier: "standard", tenantId: id }) };
}

/**
 * Registers a new Ed25519 root for the tenant (its first key, or a recovery root: pending until the
 * operator's out-of-band check) and, unless `confirm` is false, confirms it as the operator.
 */
export async function registeredRoot(
  svc: TestService,
  admin: OperatorCall | ((method: string, path: string) => Promise<void>),
  bank: Bank,
  confirm = true,
): Promise<IssuerSigner> {
  const root = await generateIssuerSigner("Ed25519");
  const added = await post(svc, "/api/v1/issuers/signing-keys", bank.key, { publicKey: root.spki });
  expect(added.status, JSON.stringify(added.body)).toBe(200);
  expect(added.body.data).toMatchObject({ signingKeyId: root.signingKeyId, status: "pending", role: "root" });
  if (confirm) {
    const path = `/admin/v1/issuers/${bank.id}/signing-keys/${root.signingKeyId}/confirm`;
    const confirmed = await admin("POST", path);
    if (confirmed !== undefined) expect(confirmed.status, JSON.stringify(confirmed.body)).toBe(200);
  }
  return root;
}

/** The `receipts.v1/signing-key` statement of role `signer` introducing `key` at tenant version `version`. */
export function signerStatement(issuerId: string, key: IssuerSigner, version: number): Uint8Array {
  return statementOf({
    v: 1,
    type: "receipts.v1/signing-key",
    issuer: issuerId,
    signingKeyId: key.signingKeyId,
    algorithm: key.algorithm,
    spki: key.spki,
    role: "signer",
    version,
    issuedAt: formatTime(Date.now()),
  });
}

/** A new Ed25519 signer of the tenant, endorsed by `root` at tenant version `version`. */
export async function endorsedSigner(
  svc: TestService,
  bank: Bank,
  root: IssuerSigner,
  version: number,
): Promise<IssuerSigner> {
  const signer = await generateIssuerSigner("Ed25519");
  const signed = await signStatement(signerStatement(bank.id, signer, version), root);
  const res = await post(svc, "/api/v1/issuers/signing-keys", bank.key, {
    publicKey: signer.spki,
    statement: signed.statement,
    signature: signed.signature,
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return signer;
}

/** A device key: P-256 SPKI (base64) and a fresh keyId. */
export function deviceKey(): { keyId: string; publicKey: string } {
  const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return {
    keyId: randomUUID(),
    publicKey: publicKey.export({ type: "spki", format: "der" }).toString("base64"),
  };
}

/**
 * A binding's members for any statement bytes (text as UTF-8), signed raw with Ed25519: the client
 * library refuses to sign what breaks the statement rules, and these tests send exactly that.
 */
export async function rawBinding(signer: IssuerSigner, statement: Uint8Array | string) {
  const bytes = typeof statement === "string" ? utf8(statement) : statement;
  const signature = new Uint8Array(await crypto.subtle.sign("Ed25519", signer.privateKey, bytes));
  return { statement: base64(bytes), signature: base64(signature), signingKeyId: signer.signingKeyId };
}
