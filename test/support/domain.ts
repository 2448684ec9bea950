import { create } from "@bufbuild/protobuf";
import { type Receipt, ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { FakeClock } from "../../src/clock.js";
import { CryptoPool } from "../../src/crypto/crypto-pool.js";
import { BackgroundTasks } from "../../src/domain/background.js";
import type { DomainDeps } from "../../src/domain/deps.js";
import { createKtRuntime, type KtRuntime } from "../../src/domain/kt/runtime.js";
import { AppError } from "../../src/errors.js";
import { NOTE_ED25519 } from "../../src/kt/note.js";
import { generateNoteSigner } from "../../src/kt/note-keys.js";
import { createLogger } from "../../src/logging.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { ApiKeyRecord, Role, Store } from "../../src/store/types.js";
import { ESCROW_FIXTURE, useFixtureRsaKeys } from "./fixture-keys.js";
import { hashPan } from "./harness.js";
import { ktConfig, ORIGIN } from "./kt.js";

/**
 * Domain dependencies over the memory store, a fake clock and a real crypto worker pool, whose key
 * generation hands out fixture keys (test/support/fixture-keys.ts): sealing and opening run on the
 * workers as in the service; finding primes is tested in test/crypto/crypto-pool.test.ts.
 */
export interface DomainFixture {
  deps: DomainDeps;
  clock: FakeClock;
  store: Store;
  pool: CryptoPool;
  /** The key log (`deps.kt` is its service), its sequencer not started. */
  kt: KtRuntime;
  close(): Promise<void>;
}

/**
 * Builds domain dependencies for tests; `store` lets a test wrap the memory store (fault injection),
 * and `escrowPrivateKeys` sets the service escrow keys (newest first; one fresh key by default).
 */
export async function domainFixture(
  options: { store?: Store; escrowPrivateKeys?: string[] } = {},
): Promise<DomainFixture> {
  const clock = new FakeClock("2026-03-01T12:00:00Z");
  const store = options.store ?? createMemoryStore();
  const escrowPrivateKeys = options.escrowPrivateKeys ?? [ESCROW_FIXTURE.privateKey];
  const pool = new CryptoPool({ escrowPrivateKeys, size: 1 });
  // RSA pairs from the fixtures (finding primes is slow); P-256 pairs are cheap, so real ones.
  useFixtureRsaKeys(pool);
  // The key log over the same store, not started: a test runs its sequencer (`kt.start()`, or rounds).
  const kt = createKtRuntime({
    store,
    clock,
    logger: createLogger("silent"),
    pepper: "test-pepper-test-pepper-test-pepper",
    config: ktConfig(),
    signer: generateNoteSigner(ORIGIN, NOTE_ED25519),
    leases: store.leases,
  });
  const deps: DomainDeps = {
    store,
    clock,
    logger: createLogger("silent"),
    pepper: "test-pepper-test-pepper-test-pepper",
    grantTtlSeconds: 180,
    escrowRetentionDays: 30,
    escrow: { intakeLimit: 60, intakeWindowSeconds: 3_600, releasePerCall: 100 },
    background: new BackgroundTasks(createLogger("silent")),
    pool,
    escrowKeys: pool.escrowKeys,
    kt: kt.log,
  };
  return {
    deps,
    clock,
    store,
    pool,
    kt,
    close: async () => {
      await kt.stop();
      await pool.close();
    },
  };
}

let counter = 0;

/** An API key record (principal) of a tenant and role, as the access interceptor would set it. */
export function principal(role: Role, tenantId: string, merchantIds: string[] = []): ApiKeyRecord {
  counter += 1;
  return {
    id: `key_test${counter}`,
    keyHash: `hash${counter}`,
    prefix: "rk_dev_test",
    env: "dev",
    tenantId,
    role,
    tier: "standard",
    merchantIds,
    name: "",
    createdAt: new Date("2026-01-01T00:00:00Z"),
  };
}

/** A valid receipt request message for card `pan`. */
export function receiptMessage(pan: string, overrides: Partial<Receipt> = {}): Receipt {
  counter += 1;
  const receipt = create(ReceiptSchema, {
    receiptId: `r-${counter}`,
    merchantId: "m-1",
    merchantName: "Corner Coffee",
    transactionId: `t-${counter}`,
    transactionDate: { seconds: BigInt(Date.parse("2026-03-01T11:00:00Z") / 1000), nanos: 0 },
    currency: "EUR",
    recipientHashedPan: hashPan(pan),
    items: [{ lineItemId: "1", name: "Tea", quantity: 1n, unitPrice: 300n, totalPrice: 300n }],
  });
  return Object.assign(receipt, overrides);
}

/** The AppError a promise rejects with; fails the test if it resolves or rejects with anything else. */
export async function rejection(promise: Promise<unknown>): Promise<AppError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof AppError) return err;
    throw err;
  }
  throw new Error("expected a rejection");
}
