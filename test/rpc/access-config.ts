import type { Config } from "../../src/config.js";

/** The access step's settings in its tests: small limits, so a few calls reach each tier's. */
export const ACCESS_CONFIG: Pick<Config, "env" | "tiers"> = {
  env: "dev",
  tiers: {
    sandbox: { requestsPerMinute: 3, generateKeysPerMinute: 1 },
    standard: { requestsPerMinute: 4, generateKeysPerMinute: 2 },
    enterprise: { requestsPerMinute: 100, generateKeysPerMinute: 10 },
  },
};
