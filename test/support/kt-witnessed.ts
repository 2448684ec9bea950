import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { IssuerSigner } from "../../src/client/key-binding.js";
import { NOTE_ED25519 } from "../../src/kt/note.js";
import { formatNoteSkey, generateNoteSigner } from "../../src/kt/note-keys.js";
import type { TrustPolicy } from "../../src/kt/policy.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/types.js";
import { startService, type TestService } from "./harness.js";
import { ORIGIN, PEPPER } from "./kt.js";
import { type OperatorCall, operatorCalls, ownBins, registeredRoot } from "./kt-issuers.js";
import { type StartedWitness, startWitnesses } from "./witnesses.js";

/**
 * The key-directory end-to-end tests' service: a memory store, the log's own key, three witness
 * servers of two organisations besides the operator, the operator API, the merchant's trust policy
 * for it (quorum 2), and what every such test does on it (operator calls, confirming a root, giving a
 * tenant its BINs, waiting until the witnesses cosigned the head).
 */

export const KT_WITNESSES = [
  { name: "w1.bank-a.example", organisation: "bank-a" },
  { name: "w2.bank-b.example", organisation: "bank-b" },
  { name: "w3.ngo.example", organisation: "ngo" },
] as const;

export interface WitnessedService {
  svc: TestService;
  /** A temporary folder (the witnesses' state), removed by `close`. */
  dir: string;
  store: Store;
  witnesses: StartedWitness[];
  /** The merchant's policy for this service: its log key, the three witnesses, quorum 2, no root delay. */
  policy: TrustPolicy;
  /** An operator call with the service's ADMIN_TOKEN: its status and parsed body. */
  admin: OperatorCall;
  /** Adds a new Ed25519 root for `tenant` (its issuer key `apiKey`) and confirms it as the operator. */
  confirmedRoot(tenant: string, apiKey: string): Promise<IssuerSigner>;
  /** Makes `bins` the tenant's BINs, with the directory change the log snapshots. */
  ownBins(tenant: string, bins: string[]): Promise<void>;
  /** Waits until nothing is pending and the head is checkpointed and cosigned by every witness. */
  witnessed(): Promise<void>;
  close(): Promise<void>;
}

/** Starts the service (`env` added to its configuration); `close` stops it and the witnesses. */
export async function startWitnessedService(options: {
  token: string;
  /** Names the temporary folder of the witnesses' state. */
  name: string;
  answerCosignatures?: number;
  env?: Record<string, string>;
}): Promise<WitnessedService> {
  const dir = mkdtempSync(join(tmpdir(), `${options.name}-`));
  const logSigner = generateNoteSigner(ORIGIN, NOTE_ED25519);
  const store = createMemoryStore();
  const closers: Array<() => Promise<unknown>> = [];
  const witnesses = await startWitnesses(ORIGIN, logSigner.key, dir, closers, KT_WITNESSES);
  const svc = await startService({
    store,
    env: {
      ADMIN_TOKEN: options.token,
      KT_LOG_PRIVATE_KEY: formatNoteSkey(logSigner),
      HASHED_PAN_PEPPER: PEPPER,
      WITNESS_URLS: witnesses.map((w) => `${w.url} ${w.vkey}`).join(","),
      KT_ANSWER_COSIGNATURES: String(options.answerCosignatures ?? 2),
      KT_SEQUENCER_POLL_MS: "20",
      KT_READS_PER_MINUTE: "100000",
      ...options.env,
    },
  });
  closers.unshift(() => svc.close());
  const policy: TrustPolicy = {
    origin: ORIGIN,
    logKey: svc.app.domain.kt.vkey,
    operator: "receipts-operator",
    witnesses: witnesses.map((w) => ({ vkey: w.vkey, organisation: w.organisation })),
    quorum: 2,
    maxCheckpointAgeSeconds: 600,
    // A development service: its roots count at once (KT_ROOT_DELAY 0).
    rootDelaySeconds: 0,
  };
  const admin = operatorCalls(svc.baseUrl, options.token);
  return {
    svc,
    dir,
    store,
    witnesses,
    policy,
    admin,
    confirmedRoot: (tenant, apiKey) => registeredRoot(svc, admin, { id: tenant, key: apiKey }),
    ownBins: (tenant, bins) => ownBins(svc, tenant, bins),
    async witnessed() {
      for (let i = 0; i < 1000; i++) {
        const pending = await store.ktLog.pending(1);
        const latest = await store.ktLog.latestCheckpoint();
        const head = await store.ktLog.head();
        if (
          pending.length === 0 &&
          latest?.size === head.size &&
          Object.keys(latest.cosignatures).length === KT_WITNESSES.length
        )
          return;
        svc.app.domain.kt.notify();
        await new Promise((r) => setTimeout(r, 20));
      }
      throw new Error("the witnesses did not cosign the head");
    },
    async close() {
      for (const close of closers) await close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
