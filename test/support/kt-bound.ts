import { generateKeyPairSync } from "node:crypto";
import type { IssuerSigner } from "../../src/client/key-binding.js";
import { startService, type TestService } from "./harness.js";
import { operatorSteps, ownBins, registeredRoot, untilSequenced } from "./kt-issuers.js";

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
  const admin = operatorSteps(svc.baseUrl, options.token);
  const sequenced = () => untilSequenced(svc);
  const { tenant, bin } = options;
  const bankKey = await svc.newKey({ role: "issuer", tier: "standard", tenantId: tenant });
  await ownBins(svc, tenant, [bin]);
  await admin("PUT", `/admin/v1/issuers/${tenant}/require-bindings`, { requireBindings: true });
  const root = await registeredRoot(svc, admin, { id: tenant, key: bankKey });
  await sequenced();
  return { svc, tenant, bin, bankKey, root, admin, sequenced };
}

/** A fresh P-256 public key, base64 SPKI. */
export function p256(): string {
  const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return publicKey.export({ type: "spki", format: "der" }).toString("base64");
}
