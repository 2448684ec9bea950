// The security core under mutation testing (issue 38), in groups: each names the files it mutates and
// the fast in-process tests that exercise them. A group runs only its own tests because module-level
// tables (the role table, the names redacted) are mutants that every test of the group runs against.
// Read by stryker.config.mjs and scripts/mutation.mjs.

/** @type {Record<string, { mutate: string[]; tests: string[] }>} */
export const GROUPS = {
  roles: { mutate: ["src/rpc/roles.ts"], tests: ["test/unit/roles.test.ts"] },
  redaction: { mutate: ["src/logging.ts"], tests: ["test/unit/logging.test.ts"] },
  operator: { mutate: ["src/http/admin-access.ts"], tests: ["test/unit/operator-token.test.ts"] },
  domain: {
    mutate: [
      "src/domain/routing.ts",
      "src/domain/merchants.ts",
      "src/domain/sealed.ts",
      "src/domain/issuer-escrow.ts",
      "src/domain/erasure.ts",
      "src/domain/grants.ts",
    ],
    tests: ["test/domain/**/*.test.ts"],
  },
  stores: {
    mutate: [
      "src/store/memory/receipts.ts",
      "src/store/memory/ownership.ts",
      "src/store/mongo/receipts.ts",
      "src/store/mongo/ownership.ts",
    ],
    tests: ["test/store/memory.test.ts", "test/store/mongo-fake.test.ts"],
  },
  kt: { mutate: ["src/kt/verify.ts"], tests: ["test/kt/verify-lies.test.ts", "test/kt/verify.test.ts"] },
  webhooks: {
    mutate: ["src/events/signing.ts", "src/events/ssrf.ts"],
    tests: ["test/events/ssrf.test.ts", "test/client/webhooks.test.ts"],
  },
};
