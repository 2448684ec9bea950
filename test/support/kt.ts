import { createHmac, randomBytes } from "node:crypto";
import { FakeClock } from "../../src/clock.js";
import type { KtConfig } from "../../src/config-kt.js";
import { createKtRuntime, type KtRuntime, type KtRuntimeOptions } from "../../src/domain/kt/runtime.js";
import type { SequencerLeases } from "../../src/domain/kt/sequencer.js";
import type { KtSigningKeyInfo, KtSigningKeys } from "../../src/domain/kt/statement-check.js";
import { utf8 } from "../../src/kt/bytes.js";
import { canonicalJson, type Json } from "../../src/kt/json.js";
import { NOTE_ED25519, type NoteSigner } from "../../src/kt/note.js";
import { generateNoteSigner } from "../../src/kt/note-keys.js";
import { formatTime, parseStatement, type Statement } from "../../src/kt/statements.js";
import { createLogger } from "../../src/logging.js";
import type { KtPendingStatement } from "../../src/store/kt-types.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/types.js";
import type { Issuer } from "../kt/world.js";

/**
 * The key log in tests: a runtime over a store, with issuers whose signing keys the test controls,
 * and helpers that make signed statements and their pending records as the intake will.
 */

export const ORIGIN = "kt.test.example/receipts/kt/v1";
export const PEPPER = "kt-test-pepper-kt-test-pepper-kt-test-pepper";

/** A KT configuration with test defaults. */
export function ktConfig(overrides: Partial<KtConfig> = {}): KtConfig {
  return {
    logPrivateKey: undefined,
    witnesses: [],
    waitMs: 5_000,
    answerCosignatures: 0,
    sequencer: true,
    sequencerPollMs: 20,
    readsPerMinute: 600,
    maxBindingDays: 35,
    witnessTimeoutMs: 2_000,
    ...overrides,
  };
}

/** A signing-key view the test edits. */
export class TestSigningKeys implements KtSigningKeys {
  readonly keys: KtSigningKeyInfo[] = [];

  add(issuer: Issuer, changes: Partial<KtSigningKeyInfo> = {}): void {
    this.keys.push({
      tenantId: issuer.tenant,
      signingKeyId: issuer.signingKeyId,
      spki: issuer.spki,
      role: "root",
      status: "current",
      ...changes,
    });
  }

  async find(tenantId: string, signingKeyId: string) {
    return this.keys.find((k) => k.tenantId === tenantId && k.signingKeyId === signingKeyId);
  }
}

/** A card: its hashed PAN (the cardRef of its statements) and the keyed reference the service stores. */
export function testCard(): { hashedPan: string; cardKey: string } {
  const hashedPan = randomBytes(32).toString("hex");
  return { hashedPan, cardKey: createHmac("sha256", PEPPER).update(hashedPan).digest("hex") };
}

/** A user key's binding statement members (a P-256 key stand-in: only its digest matters here). */
export function userKey(): { keyId: string; spkiSha256: string } {
  const h = randomBytes(16).toString("hex");
  return {
    keyId: `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`,
    spkiSha256: randomBytes(32).toString("base64url"),
  };
}

export interface Rig {
  store: Store;
  clock: FakeClock;
  signer: NoteSigner;
  keys: TestSigningKeys;
  leases: SequencerLeases;
  runtime: KtRuntime;
  /** Another instance of the service on the same store (its own runtime, the same lease). */
  instance(options?: Partial<KtRuntimeOptions>): KtRuntime;
}

/** A runtime over `store` (default a new memory store), not started. */
export function ktRig(options: Partial<KtRuntimeOptions> & { store?: Store } = {}): Rig {
  const store = options.store ?? createMemoryStore();
  const clock = (options.clock as FakeClock | undefined) ?? new FakeClock("2026-11-25T12:00:00Z");
  const signer = options.signer ?? generateNoteSigner(ORIGIN, NOTE_ED25519);
  const keys = new TestSigningKeys();
  const leases = options.leases ?? store.leases;
  const instance = (extra: Partial<KtRuntimeOptions> = {}) =>
    createKtRuntime({
      store,
      clock,
      logger: createLogger("silent"),
      pepper: PEPPER,
      config: ktConfig(),
      signer,
      leases,
      signingKeys: keys,
      ...options,
      ...extra,
    });
  return { store, clock, signer, keys, leases, runtime: instance(), instance };
}

/** A key binding signed by `issuer`, as its parsed statement, bytes and signature. */
export function signedBinding(
  issuer: Issuer,
  card: { hashedPan: string },
  key: { keyId: string; spkiSha256: string },
  changes: Record<string, Json> = {},
  now = Date.parse("2026-11-25T12:00:00Z"),
): { statement: Statement; bytes: Uint8Array; signature: Uint8Array } {
  const text = canonicalJson({
    v: 1,
    type: "receipts.v1/key-binding",
    issuer: issuer.tenant,
    cardRef: card.hashedPan,
    bin: "41111111",
    keyId: key.keyId,
    algorithm: "HPKE-P256-SHA256-A256GCM",
    spkiSha256: key.spkiSha256,
    version: 1,
    supersedes: null,
    notBefore: formatTime(now - 86_400_000),
    notAfter: formatTime(now + 30 * 86_400_000),
    ...changes,
  });
  const parsed = parseStatement(text);
  if (!parsed.ok) throw new Error(parsed.reason);
  const bytes = utf8(text);
  return { statement: parsed.value, bytes, signature: issuer.sign(bytes) };
}

/** The pending record of a binding, as the intake makes it. */
export function pendingOf(
  runtime: KtRuntime,
  issuer: Issuer,
  card: { hashedPan: string; cardKey: string },
  signed: { statement: Statement; bytes: Uint8Array; signature: Uint8Array },
): KtPendingStatement {
  return runtime.log.pendingStatement({
    tenantId: issuer.tenant,
    statement: signed.statement,
    bytes: signed.bytes,
    signature: signed.signature,
    signingKeyId: issuer.signingKeyId,
    card: { kind: "hashed-pan", ref: card.hashedPan, key: card.cardKey },
  });
}
