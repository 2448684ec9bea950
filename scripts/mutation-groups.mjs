// The security core under mutation testing (issue 38), in groups: each names the files it mutates and
// the fast in-process tests that exercise them. A group runs only its own tests because module-level
// tables (the role table, the names redacted) are mutants that every test of the group runs against.
// Read by stryker.config.mjs and scripts/mutation.mjs.

/** @type {Record<string, { mutate: string[]; tests: string[] }>} */
export const GROUPS = {
  roles: { mutate: ["src/rpc/policy.ts"], tests: ["test/unit/roles.test.ts", "test/unit/policy.test.ts"] },
  redaction: { mutate: ["src/logging.ts"], tests: ["test/unit/logging.test.ts"] },
  operator: { mutate: ["src/http/admin-access.ts"], tests: ["test/unit/operator-token.test.ts"] },
  // The domain files one group each, with the domain tests that exercise that file: all six against
  // every domain test took 43 minutes; a changed file in CI now runs only its own group.
  "issuer-escrow": {
    mutate: ["src/domain/issuer-escrow.ts"],
    tests: [
      "test/domain/issuer-escrow-attacks.test.ts",
      "test/domain/escrow-release-refusals.test.ts",
      "test/domain/escrow-release-key.test.ts",
    ],
  },
  merchants: {
    mutate: ["src/domain/merchants.ts"],
    tests: ["test/domain/merchant-claims.test.ts", "test/domain/merchants-attacks.test.ts"],
  },
  routing: {
    mutate: ["src/domain/routing.ts"],
    tests: ["test/domain/routing-attacks.test.ts", "test/domain/security-core-attacks.test.ts"],
  },
  sealed: {
    mutate: ["src/domain/sealed.ts"],
    tests: ["test/domain/sealed-attacks.test.ts", "test/domain/merchant-claims.test.ts"],
  },
  grants: {
    mutate: ["src/domain/grants.ts"],
    tests: [
      "test/domain/grants-attacks.test.ts",
      "test/domain/security-core-attacks.test.ts",
      "test/domain/grant-expiry.test.ts",
    ],
  },
  erasure: {
    mutate: ["src/domain/erasure.ts"],
    tests: [
      "test/domain/erasure-attacks.test.ts",
      "test/domain/erasure-keep.test.ts",
      "test/domain/erasure-pages.test.ts",
    ],
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
