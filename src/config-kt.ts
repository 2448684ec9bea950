import { readFileSync } from "node:fs";
import { COSIGNATURE_ED25519, NOTE_ED25519, ORIGIN_SUFFIX, parseVkey } from "./kt/note.js";
import { parseNoteSkey } from "./kt/note-keys.js";
import { DEFAULT_MAX_BINDING_DAYS } from "./kt/statements.js";
import type { Environment } from "./store/types.js";

/**
 * The key log's configuration (docs/key-transparency.md), read with the rest of the configuration
 * (`loadConfig`) and reported with it: the log's signing key, the witnesses, and the log's limits.
 */
export interface KtConfig {
  /**
   * The log's private key (`KT_LOG_PRIVATE_KEY` or the file `KT_LOG_PRIVATE_KEY_FILE`), a C2SP note key
   * `PRIVATE+KEY+<host>/receipts/kt/v1+<id>+<key>` (`receipts kt keygen` makes one); its name is the
   * log's origin. Undefined in development without one: a key is made for the process.
   */
  logPrivateKey: string | undefined;
  /** The witnesses of `WITNESS_URLS`: each `<url> <vkey>`, comma- or newline-separated. */
  witnesses: Array<{ url: string; vkey: string }>;
  /** How long a call waits for its statement's leaf under a checkpoint (`KT_LOG_WAIT_MS`, default 10 000). */
  waitMs: number;
  /**
   * Cosignatures an answer's checkpoint should carry (`KT_ANSWER_COSIGNATURES`; default 2, or the
   * number of witnesses when fewer): answers use the newest checkpoint that has them.
   */
  answerCosignatures: number;
  /** Whether this instance runs the sequencer loop (`KT_SEQUENCER`, `on` by default; one instance works at a time). */
  sequencer: boolean;
  /** Time between the sequencer's rounds when nothing wakes it (`KT_SEQUENCER_POLL_MS`, default 100). */
  sequencerPollMs: number;
  /** Public `/kt/v1` reads per client address per minute (`KT_READS_PER_MINUTE`, default 600). */
  readsPerMinute: number;
  /** `KT_MAX_BINDING_DAYS`, default 35: the longest validity of a binding or escrow key statement. */
  maxBindingDays: number;
  /** Time limit of one request to a witness (`KT_WITNESS_TIMEOUT_MS`, default 5000). */
  witnessTimeoutMs: number;
}

/** The fixed times, in one place. */
export const KT_TIMES = {
  /** The sequencer's lease, ms: another instance takes over within this after its holder stops. */
  leaseTtlMs: 10_000,
  /** Witnesses are asked again at least this often with nothing new (fresh cosignatures), ms. */
  witnessIntervalMs: 10 * 60_000,
  /** A new directory snapshot at least this often, ms. */
  directoryRefreshMs: 24 * 3_600_000,
  /** Pending records per append. */
  batchSize: 256,
  /**
   * How long a register answer, its leaf under a checkpoint the log signed, waits on for the witnesses'
   * cosignatures of it (so that a device's trust policy can verify the answer), ms; then it answers
   * the log-signed checkpoint alone.
   */
  answerWitnessGraceMs: 2_000,
} as const;

/** What `readKtConfig` needs from `loadConfig`'s readers. */
export interface KtSettings {
  env: NodeJS.ProcessEnv;
  problems: string[];
  int(name: string, fallback: number, min: number, max: number): number;
  oneOf<T extends string>(name: string, allowed: readonly string[], fallback: T): T;
}

/** Reads the key log's settings; a log key is required in production and with MongoDB, as the pepper is. */
export function readKtConfig(
  settings: KtSettings,
  receiptsEnv: Environment,
  store: "memory" | "mongodb",
): KtConfig {
  const { problems, int, oneOf } = settings;
  const logPrivateKey = readLogKey(settings);
  if (logPrivateKey === undefined && receiptsEnv === "live") {
    problems.push(
      "KT_LOG_PRIVATE_KEY or KT_LOG_PRIVATE_KEY_FILE is required in production (RECEIPTS_ENV=live)",
    );
  } else if (logPrivateKey === undefined && store === "mongodb") {
    problems.push("KT_LOG_PRIVATE_KEY or KT_LOG_PRIVATE_KEY_FILE is required with STORE=mongodb");
  }
  const witnesses = readWitnesses(settings);
  return {
    logPrivateKey,
    witnesses,
    waitMs: int("KT_LOG_WAIT_MS", 10_000, 100, 120_000),
    answerCosignatures: int("KT_ANSWER_COSIGNATURES", Math.min(2, witnesses.length), 0, witnesses.length),
    sequencer: oneOf("KT_SEQUENCER", ["on", "off"], "on") === "on",
    sequencerPollMs: int("KT_SEQUENCER_POLL_MS", 100, 10, 10_000),
    readsPerMinute: int("KT_READS_PER_MINUTE", 600, 1, 1_000_000),
    maxBindingDays: int("KT_MAX_BINDING_DAYS", DEFAULT_MAX_BINDING_DAYS, 1, 366),
    witnessTimeoutMs: int("KT_WITNESS_TIMEOUT_MS", 5_000, 100, 60_000),
  };
}

/** `KT_LOG_PRIVATE_KEY` or the file of `KT_LOG_PRIVATE_KEY_FILE` (not both), checked: a log key named `<host>/receipts/kt/v1`. */
function readLogKey({ env, problems }: KtSettings): string | undefined {
  let text = env.KT_LOG_PRIVATE_KEY || undefined;
  const file = env.KT_LOG_PRIVATE_KEY_FILE || undefined;
  if (text !== undefined && file !== undefined) {
    problems.push("set only one of KT_LOG_PRIVATE_KEY and KT_LOG_PRIVATE_KEY_FILE");
    return undefined;
  }
  if (file !== undefined) {
    try {
      text = readFileSync(file, "utf8");
    } catch {
      problems.push(`KT_LOG_PRIVATE_KEY_FILE cannot be read (${file})`);
      return undefined;
    }
  }
  if (text === undefined) return undefined;
  const parsed = parseNoteSkey(text, [NOTE_ED25519]);
  if (!parsed.ok) {
    // The reason names the format only: the key itself never reaches a message.
    problems.push(`KT_LOG_PRIVATE_KEY is not a log key: ${parsed.reason}`);
    return undefined;
  }
  if (!parsed.signer.key.name.endsWith(ORIGIN_SUFFIX)) {
    problems.push(`KT_LOG_PRIVATE_KEY must be named <host>${ORIGIN_SUFFIX} (the log's origin)`);
    return undefined;
  }
  return text.trim();
}

/** `WITNESS_URLS`: entries `<url> <vkey>`, separated by commas or newlines; each URL http(s), each vkey a cosigner. */
function readWitnesses({ env, problems }: KtSettings): Array<{ url: string; vkey: string }> {
  const raw = env.WITNESS_URLS?.trim() ?? "";
  if (raw === "") return [];
  const out: Array<{ url: string; vkey: string }> = [];
  for (const entry of raw
    .split(/[,\n]/)
    .map((e) => e.trim())
    .filter((e) => e !== "")) {
    const [url, vkey, ...rest] = entry.split(/\s+/);
    let good = url !== undefined && vkey !== undefined && rest.length === 0;
    try {
      const protocol = new URL(url ?? "").protocol;
      good &&= protocol === "http:" || protocol === "https:";
    } catch {
      good = false;
    }
    const key = vkey === undefined ? undefined : parseVkey(vkey);
    if (!good || key === undefined || key.type !== COSIGNATURE_ED25519) {
      problems.push(`WITNESS_URLS: "${entry.slice(0, 200)}" is not "<http(s) URL> <witness vkey>"`);
      continue;
    }
    if (out.some((w) => parseVkey(w.vkey)?.name === key.name)) {
      problems.push(`WITNESS_URLS: the witness ${key.name} is listed twice`);
      continue;
    }
    out.push({ url: url as string, vkey: vkey as string });
  }
  return out;
}
