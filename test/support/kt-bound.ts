import { generateKeyPairSync } from "node:crypto";
import { expect } from "vitest";
import { generateIssuerSigner, type IssuerSigner } from "../../src/client/key-binding.js";
import { post, startService, type TestService } from "./harness.js";

/**
 * A service (no witnesses) with one issuer tenant that owns a BIN, set requireBindings and has a
 * confirmed root: the set-up of the tests of server-side sealing's check against the key log.
 */
export interface BoundIssuer {
  svc: TestService;
  tenant: string;
  bin: string;
  /** The tenant's issuer API key. */
  bankKey: string;
  root: IssuerSigner;
  /** An operator call with the service's ADMIN_TOKEN, which must answer 200. */
  admin(method: string, path: string, body?: unknown): Promise<void>;
  /** Waits until nothing is pending and the newest checkpoint covers the whole log. */
  sequenced(): Promise<void>;
}

export async function startBoundIssuer(options: {
  token: string;
  tenant: string;
  bin: string;
  env?: Record<string, string>;
}): Promise<BoundIssuer> {
  const svc = await startService({
    env: { ADMIN_TOKEN: options.token, KT_SEQUENCER_POLL_MS: "20", ...options.env },
  });
  const admin = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${svc.baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${options.token}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
  };
  const sequenced = async () => {
    for (let i = 0; i < 400; i++) {
      const pending = await svc.store.ktLog.pending(1);
      const head = await svc.store.ktLog.head();
      const latest = await svc.store.ktLog.latestCheckpoint();
      if (pending.length === 0 && head.size > 0 && latest?.size === head.size) return;
      svc.app.domain.kt.notify();
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error("the log did not catch up");
  };
  const { tenant, bin } = options;
  const bankKey = await svc.newKey({ role: "issuer", tier: "standard", tenantId: tenant });
  const change = svc.app.domain.kt.pendingDirectoryChange("bins.set", tenant);
  expect((await svc.store.bins.set(tenant, [bin], new Date(), [change])).kind).toBe("set");
  await admin("PUT", `/admin/v1/issuers/${tenant}/require-bindings`, { requireBindings: true });
  const root = await generateIssuerSigner("Ed25519");
  const added = await post(svc, "/api/v1/issuers/signing-keys", bankKey, { publicKey: root.spki });
  expect(added.status, JSON.stringify(added.body)).toBe(200);
  await admin("POST", `/admin/v1/issuers/${tenant}/signing-keys/${root.signingKeyId}/confirm`);
  await sequenced();
  return { svc, tenant, bin, bankKey, root, admin, sequenced };
}

/** A fresh P-256 public key, base64 SPKI. */
export function p256(): string {
  const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return publicKey.export({ type: "spki", format: "der" }).toString("base64");
}
