import { createApiKey } from "./domain/api-keys.js";
import type { Store } from "./store/types.js";

/**
 * The two development API keys (issuer and merchant) that a server with the embedded store creates at
 * start-up and prints. A node:cluster primary (`cluster.ts`) creates them once and hands them to its
 * workers in {@link DEV_KEYS_ENV}, so that every worker accepts the same keys.
 */

/** The environment variable that carries the primary's development keys to cluster workers. */
export const DEV_KEYS_ENV = "RECEIPTS_DEV_API_KEYS";

/** An issuer key and a merchant key, `rk_dev_...`. */
export interface DevKeys {
  issuer: string;
  merchant: string;
}

/**
 * Stores the development keys (tier `standard`, any merchantId) in `store`: the `given` ones, or two
 * new ones. Returns the keys, which exist nowhere else.
 */
export async function createDevKeys(store: Store, now: Date, given?: DevKeys): Promise<DevKeys> {
  const issuer = await createApiKey(
    store,
    "dev",
    { role: "issuer", tier: "standard", tenantId: "dev-issuer" },
    now,
    given?.issuer,
  );
  const merchant = await createApiKey(
    store,
    "dev",
    { role: "merchant", tier: "standard", tenantId: "dev-merchant" },
    now,
    given?.merchant,
  );
  return { issuer: issuer.key, merchant: merchant.key };
}

/** The keys in {@link DEV_KEYS_ENV}, or undefined when it is unset or malformed. */
export function devKeysFromEnv(env: NodeJS.ProcessEnv): DevKeys | undefined {
  const raw = env[DEV_KEYS_ENV];
  if (raw === undefined || raw === "") return undefined;
  try {
    const parsed = JSON.parse(raw) as Partial<DevKeys>;
    const { issuer, merchant } = parsed;
    return typeof issuer === "string" && typeof merchant === "string" ? { issuer, merchant } : undefined;
  } catch {
    return undefined;
  }
}

/** The terminal banner that shows the keys. */
export function devKeysBanner(keys: DevKeys): string {
  return [
    "",
    "Development API keys (embedded store, valid until the server stops):",
    `  issuer   (tenant dev-issuer):   ${keys.issuer}`,
    `  merchant (tenant dev-merchant): ${keys.merchant}`,
    "",
    "",
  ].join("\n");
}
