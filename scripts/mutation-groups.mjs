// The security core under mutation testing (issue 38), in groups: each names the files it mutates and
// the fast in-process tests that exercise them. A group runs only its own tests because module-level
// tables (the role table, the names redacted) are mutants that every test of the group runs against.
// Read by stryker.config.mjs and scripts/mutation.mjs.

/** @type {Record<string, { mutate: string[]; tests: string[]; timeoutMS?: number }>} */
export const GROUPS = {
  roles: { mutate: ["src/rpc/policy.ts"], tests: ["test/rpc/roles.test.ts", "test/rpc/policy.test.ts"] },
  redaction: { mutate: ["src/logging.ts"], tests: ["test/logging.test.ts"] },
  operator: { mutate: ["src/rpc/operator-access.ts"], tests: ["test/rpc/operator-token.test.ts"] },
  // An API call's key, roles and rate count: the access step and the key checks it runs, against the
  // step's reference comparison, every method's roles and the request line's tenant.
  access: {
    mutate: ["src/domain/api-keys.ts", "src/rpc/interceptors.ts"],
    tests: [
      "test/rpc/access-step.test.ts",
      "test/rpc/access-paths.test.ts",
      "test/rpc/roles.test.ts",
      "test/rpc/request-line.test.ts",
    ],
  },
  // The domain files one group each, with the domain tests that exercise that file: all six against
  // every domain test took 43 minutes; a changed file in CI now runs only its own group.
  "issuer-escrow": {
    mutate: ["src/domain/issuer-escrow.ts"],
    tests: [
      "test/domain/issuer-escrow-attacks.test.ts",
      "test/domain/escrow-release-refusals.test.ts",
      "test/domain/escrow-release-key.test.ts",
      "test/domain/kt/escrow-release-check.test.ts",
      "test/domain/escrow-copy-recovery.test.ts",
    ],
  },
  merchants: {
    mutate: ["src/domain/merchants.ts"],
    tests: ["test/domain/merchant-claims.test.ts", "test/domain/merchants-attacks.test.ts"],
  },
  // With the key directory's answers: which statement a look-up proves (the card's, the BIN owner's
  // escrow key's, none for the service key), and a card the operator moved before its new issuer
  // registered it (escrowed for that issuer). Without these three its lines of them scored 3.1%.
  routing: {
    mutate: ["src/domain/routing.ts"],
    tests: [
      "test/domain/routing-attacks.test.ts",
      "test/domain/lookup-hmac.test.ts",
      "test/domain/security-core-attacks.test.ts",
      "test/e2e/kt-lookup-proofs.test.ts",
      "test/domain/kt/escrow-keys.test.ts",
      "test/e2e/kt-card-transfer.test.ts",
    ],
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
      "test/domain/kt/erasure-revocation.test.ts",
    ],
  },
  // The stores one group per file, as the domain: a changed store file in CI runs only its own group.
  // The memory store's files against the contract suite on the memory store; the MongoDB adapter's
  // against the same suite on the driver-level fake, plus the adapter's own tests on that fake and its
  // declared transactions on the fake as a cluster.
  // The receipt page's tests hold each store's proofs of its sealed texts (src/store/sealed-texts.ts).
  "store-memory-receipts": {
    mutate: ["src/store/memory/receipts.ts"],
    tests: ["test/store/memory.test.ts", "test/rpc/receipt-page.test.ts"],
  },
  "store-memory-ownership": {
    mutate: ["src/store/memory/ownership.ts"],
    tests: ["test/store/memory.test.ts"],
  },
  "store-mongo-receipts": {
    mutate: ["src/store/mongo/receipts.ts"],
    tests: [
      "test/store/mongo-fake.test.ts",
      "test/store/mongo-adapter.test.ts",
      "test/store/mongo-declared.test.ts",
      "test/store/mongo-migration.test.ts",
      "test/store/mongo-unavailable.test.ts",
      "test/store/mongo-indexes-snapshot.test.ts",
      "test/docs/scaling.test.ts",
      "test/rpc/receipt-page.test.ts",
    ],
  },
  "store-mongo-ownership": {
    mutate: ["src/store/mongo/ownership.ts"],
    tests: [
      "test/store/mongo-fake.test.ts",
      "test/store/mongo-adapter.test.ts",
      "test/store/mongo-declared.test.ts",
      "test/store/mongo-indexes-snapshot.test.ts",
      "test/docs/scaling.test.ts",
    ],
  },
  // The root delay is held through the client (an in-process fixture server on a local port, 20 s):
  // without root-delay.test.ts its step in verify.ts had 12 mutants no test of the group reached.
  kt: {
    mutate: ["src/kt/verify.ts"],
    tests: [
      "test/kt/verify-lies.test.ts",
      "test/kt/verify.test.ts",
      "test/client/root-delay.test.ts",
      "test/kt/root-rotation.test.ts",
      // The verdict's notBefore as KeyTrust orders a card's bindings by it (an older one refused as stale).
      "test/client/key-trust.test.ts",
    ],
  },
  // The key directory's verification below verify.ts, one group per file. Pure functions with fast
  // tests: a mutant that loops forever is given up after 10 s more than its tests took.
  // With the configuration's test: it alone holds the log's origin suffix (a log key named otherwise
  // is refused at start-up, naming the suffix), which no note or witness test reads.
  "kt-note": {
    mutate: ["src/kt/note.ts"],
    tests: ["test/kt/note.test.ts", "test/kt/witness.test.ts", "test/config.test.ts"],
    timeoutMS: 10_000,
  },
  "kt-policy": {
    mutate: ["src/kt/policy.ts"],
    tests: ["test/kt/policy.test.ts", "test/kt/verify.test.ts"],
    timeoutMS: 10_000,
  },
  // The signature rule: the forger's boundaries (S = L, r = n, non-canonical and small-order points,
  // each refused before a lax engine is asked) and the shared vectors; about 10 minutes at one process.
  "kt-signatures": {
    mutate: ["src/kt/signatures.ts"],
    tests: ["test/kt/signatures-attacks.test.ts", "test/kt/signatures.test.ts"],
    timeoutMS: 10_000,
  },
  // RFC 9162 hashing and proofs against the RFC written out recursively in the test, with forged
  // proofs (wrong length, index, size, split hashes). merkle.test.ts (the reference probes and the
  // sweeps to 64 leaves, 25 s a run) is left out: every mutant would wait for its sweeps.
  "kt-merkle": {
    mutate: ["src/kt/merkle.ts"],
    tests: ["test/kt/merkle-attacks.test.ts"],
    timeoutMS: 10_000,
  },
  webhooks: {
    mutate: ["src/events/signing.ts", "src/events/ssrf.ts"],
    tests: ["test/events/ssrf.test.ts", "test/client/webhooks.test.ts"],
  },
};
