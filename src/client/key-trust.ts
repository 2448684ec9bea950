/* Over 400 lines on purpose: what a merchant trusts before it seals is one unit, read by a bank's review
 * in one place: the answer taken apart into the wire shape the verifier was written for, the snapshot
 * fetched and cached by its hash, the verification, and each card's newest binding kept against replays. */
import { RSA_SUITE, suiteOfKeyType } from "../crypto/suites.js";
import { base64, fromBase64Strict, fromUtf8, toHex } from "../kt/bytes.js";
import { defaultSha256 } from "../kt/hash.js";
import { type ParsedPolicy, parsePolicy, type TrustPolicy } from "../kt/policy.js";
import { nobleEngine, type SignatureEngine } from "../kt/signatures.js";
import { type KnownCard, type KtCheck, VerifierCache, verifyLookup } from "../kt/verify.js";
import type { KtLookupAnswer } from "../kt/wire.js";
import { derKindOf } from "./client-keys.js";

/**
 * The merchant's trust in the key directory (docs/key-transparency.md, "The merchant's verification"): a
 * trust policy that ships with the merchant's build or its configuration (never fetched from the service),
 * and the check of a lookup (or register) answer under it before anything is sealed. The service's answer is
 * taken apart and rebuilt here: the checkpoint must carry the log's signature and a fresh witness
 * quorum, the directory snapshot is fetched by its SHA-256 and proven under that checkpoint, the
 * card's owner comes from the snapshot and the card's own BIN (which only the merchant knows), and
 * the signed statement's rebuilt leaf must be in the tree. Any failure is a {@link KeyVerificationError}.
 */

/**
 * The card a receipt is for, as the merchant itself knows it: the card reference it looks up (SHA-256
 * of the card number, or the wallet's PAR) and the card's own BIN, read from the card number (its
 * first 6 or 8 digits) or, for a wallet tap, from the device token (its first 8 digits). The BIN must
 * come from the card in hand: the issuer that owns it is the only one whose signature counts.
 */
export type CardIdentity = ({ hashedPan: string } | { par: string }) &
  ({ bin: string } | { tokenBin: string });

/**
 * Why a key was refused: the check of `verifyLookup` that failed, or a step around it (`stale`: a
 * binding older than one this verifier has already verified for the card).
 */
export type KeyVerificationCheck = KtCheck | "answer" | "fetch" | "stale";

/**
 * A lookup or register answer that did not verify under the trust policy. Nothing was sealed or sent
 * after it. `check` names the failed check, `reason` says why; neither holds a secret (the card
 * reference is never in the message).
 */
export class KeyVerificationError extends Error {
  readonly code = "key_not_verified";

  constructor(
    readonly check: KeyVerificationCheck,
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(`the recipient's key is not verified (${check}): ${reason}`, options);
    this.name = "KeyVerificationError";
  }
}

/** A key that passed every check: what to seal to, and what vouched for it. */
export interface VerifiedKey {
  keyId: string;
  algorithm: string;
  /** Base64 SPKI DER, exactly as the answer gave it. */
  publicKey: string;
  /** Whether the wrap must be bound to the receipt's AAD (escrow keys; HPKE always is). */
  aadBound: boolean;
  isEscrowed: boolean;
  /** The issuer whose signed statement vouches for the key; null for the service's escrow key. */
  issuer: string | null;
  /** The statement's version; null for the service's escrow key. */
  version: number | null;
  /** The checkpoint's tree size and the time (seconds) its witness quorum vouches for. */
  treeSize: number;
  witnessedAt: number;
}

/** Options of {@link createKeyTrust}. */
export interface KeyTrustOptions {
  /** The trust policy (docs/key-transparency.md, "Trust policy"); checked here, a bad one throws. */
  policy: TrustPolicy;
  /** The service's base URL (e.g. `https://receipts.example.com`): where `/kt/v1/directory/{sha256}` is. */
  baseUrl: string;
  /** The `fetch` that reads snapshots (default `globalThis.fetch`). */
  fetch?: typeof globalThis.fetch;
  /** The clock, in milliseconds since the epoch (default `Date.now`). */
  now?: () => number;
  /** Snapshot bodies kept, by SHA-256 (default 8; a snapshot never changes, so a hit needs no fetch). */
  cacheSize?: number;
  /** The largest snapshot body read, in bytes (default 16 MiB); a larger one is refused. */
  maxDirectoryBytes?: number;
  /** Deadline of one snapshot fetch, in milliseconds (default 10 000). */
  fetchTimeoutMs?: number;
  /** The signature equations (default noble's, pure JavaScript: the same answers everywhere). */
  engine?: SignatureEngine;
  /**
   * When this verifier first saw each issuer root current, as the witnesses' time (seconds), by
   * `issuer + " " + signingKeyId`: the root delay (`rootDelaySeconds`) counts from there. Pass a map
   * kept across restarts so that a root already waited for is not waited for again; default empty.
   */
  rootsSeen?: Map<string, number>;
  /**
   * The newest key binding this verifier has verified for each card, by card reference (the hashed
   * PAN in lower case, or the PAR): an answer with an older binding of the card (one that starts
   * earlier, or at the same time with a lower `version`) is refused as `stale`, so the service cannot
   * go back to a key the card's issuer has since rotated away from or revoked once this merchant has
   * verified the newer binding. Pass a map kept across restarts to keep that memory; default empty.
   */
  newestBindings?: Map<string, NewestBinding>;
}

/** What {@link KeyTrustOptions.newestBindings} keeps of a card's newest verified binding. */
export interface NewestBinding {
  version: number;
  /** The binding's `notBefore` (`YYYY-MM-DDTHH:MM:SSZ`). */
  notBefore: string;
}

/** Verifies lookup answers under one trust policy; made by {@link createKeyTrust}, shared by every seal. */
export interface KeyTrust {
  readonly policy: ParsedPolicy;
  /**
   * Checks `answer` (the JSON `data` of lookup or register, or the client's `LookupKeyResponse`) for
   * `card`, fetching the directory snapshot it names when not cached. Resolves with the key to seal
   * to; rejects with a {@link KeyVerificationError}.
   */
  verify(answer: unknown, card: CardIdentity, options?: { signal?: AbortSignal }): Promise<VerifiedKey>;
}

const DEFAULT_CACHE_SIZE = 8;
const DEFAULT_MAX_DIRECTORY_BYTES = 16 * 1024 * 1024;
const DEFAULT_FETCH_TIMEOUT_MS = 10_000;
const HASHED_PAN = /^[0-9a-fA-F]{64}$/;
const PAR = /^[0-9A-Z]{29}$/;
const SHA256_HEX = /^[0-9a-f]{64}$/;

/**
 * Makes a {@link KeyTrust}. Throws `TypeError` for a bad policy or base URL, so a misconfigured
 * merchant fails at start-up, before its first receipt.
 */
export function createKeyTrust(options: KeyTrustOptions): KeyTrust {
  const policy = parsePolicy(options.policy);
  const base = new URL(options.baseUrl);
  const fetchFn = options.fetch ?? globalThis.fetch.bind(globalThis);
  const now = options.now ?? Date.now;
  const engine = options.engine ?? nobleEngine;
  const verifierCache = new VerifierCache();
  const seen = options.rootsSeen ?? new Map<string, number>();
  const newest = options.newestBindings ?? new Map<string, NewestBinding>();
  const rootSightings = (issuer: string, rootId: string, witnessedAt: number): number => {
    const key = `${issuer} ${rootId}`;
    const first = Math.min(seen.get(key) ?? witnessedAt, witnessedAt);
    seen.set(key, first);
    return first;
  };
  const snapshots = new SnapshotCache(options.cacheSize ?? DEFAULT_CACHE_SIZE, (sha256, signal) =>
    fetchSnapshot(fetchFn, new URL(`kt/v1/directory/${sha256}`, withSlash(base)), sha256, signal, {
      maxBytes: options.maxDirectoryBytes ?? DEFAULT_MAX_DIRECTORY_BYTES,
      timeoutMs: options.fetchTimeoutMs ?? DEFAULT_FETCH_TIMEOUT_MS,
    }),
  );
  return {
    policy,
    async verify(raw, card, callOptions = {}) {
      const answer = lookupAnswerOf(raw);
      const known = knownCardOf(card);
      const spki = fromBase64Strict(answer.publicKey);
      if (spki === undefined) throw new KeyVerificationError("answer", "publicKey is not base64");
      // The seal picks its suite from the key's type: it must be the suite the answer (and so the binding) names.
      const suite = (suiteOfKeyType(derKindOf(answer.publicKey)) ?? RSA_SUITE).algorithm;
      if (suite !== answer.algorithm)
        throw new KeyVerificationError("key", "the key's type is not the suite the answer names");
      const sha256 = answer.directory.sha256;
      if (!SHA256_HEX.test(sha256)) {
        throw new KeyVerificationError("answer", "directory.sha256 is not 64 lower-case hex digits");
      }
      const directoryJson = await snapshots.get(sha256, callOptions.signal);
      const verdict = verifyLookup(
        policy,
        {
          answer,
          card: known,
          sealTo: { keyId: answer.keyId, algorithm: answer.algorithm, spki },
          directoryJson,
          now: now(),
          rootSightings,
        },
        { engine, cache: verifierCache },
      );
      if (!verdict.ok) throw new KeyVerificationError(verdict.check, verdict.reason);
      if (verdict.version !== null && verdict.notBefore !== null) {
        keepNewest(newest, known, { version: verdict.version, notBefore: verdict.notBefore });
      }
      return {
        keyId: answer.keyId,
        algorithm: answer.algorithm,
        publicKey: answer.publicKey,
        // An escrow wrap is always bound (the service refuses an unbound one); never weaken it on its word.
        aadBound: answer.aadBound || answer.isEscrowed,
        isEscrowed: answer.isEscrowed,
        issuer: verdict.issuer,
        version: verdict.version,
        treeSize: verdict.treeSize,
        witnessedAt: verdict.witnessedAt,
      };
    },
  };
}

/**
 * Refuses `binding` when `newest` holds a newer one for the card, else keeps it as the card's newest.
 * Newer is a later `notBefore`, and at the same `notBefore` a higher version. Not the version alone:
 * an erased card registered again starts again at version 1, under a binding that starts later than
 * the old ones. An issuer dates each statement when it signs it; one that dated a newer binding
 * before an older one would have it refused here (closed, never a key accepted). An older binding
 * stays provable under every later checkpoint, so the service can answer it again: this refuses it.
 */
function keepNewest(newest: Map<string, NewestBinding>, card: KnownCard, binding: NewestBinding): void {
  const ref = "hashedPan" in card.cardRef ? card.cardRef.hashedPan : card.cardRef.par;
  const known = newest.get(ref);
  if (
    known !== undefined &&
    (binding.notBefore < known.notBefore ||
      (binding.notBefore === known.notBefore && binding.version < known.version))
  ) {
    throw new KeyVerificationError(
      "stale",
      `the card's binding (version ${binding.version}) is older than one already verified (version ${known.version})`,
    );
  }
  newest.set(ref, binding);
}

/** The card as `verifyLookup` takes it, after checking the merchant gave both halves well-formed. */
export function knownCardOf(card: CardIdentity): KnownCard {
  const c = (card ?? {}) as Partial<Record<"hashedPan" | "par" | "bin" | "tokenBin", unknown>>;
  const refs = [c.hashedPan, c.par].filter((v) => v !== undefined);
  const bins = [c.bin, c.tokenBin].filter((v) => v !== undefined);
  if (refs.length !== 1) throw new KeyVerificationError("card", "give exactly one of hashedPan and par");
  if (bins.length !== 1) {
    throw new KeyVerificationError(
      "card",
      "give the card's own BIN: bin (the card number's first 6 or 8 digits) or tokenBin (a wallet token's first 8)",
    );
  }
  let cardRef: KnownCard["cardRef"];
  if (c.hashedPan !== undefined) {
    if (typeof c.hashedPan !== "string" || !HASHED_PAN.test(c.hashedPan))
      throw new KeyVerificationError("card", "hashedPan must be 64 hexadecimal characters");
    cardRef = { hashedPan: c.hashedPan.toLowerCase() };
  } else {
    if (typeof c.par !== "string" || !PAR.test(c.par))
      throw new KeyVerificationError("card", "par must be 29 upper-case letters and digits");
    cardRef = { par: c.par };
  }
  if (c.bin !== undefined) {
    if (typeof c.bin !== "string" || !/^(\d{6}|\d{8})$/.test(c.bin))
      throw new KeyVerificationError("card", "bin must be the card number's first 6 or 8 digits");
    return { cardRef, bin: { digits: c.bin, kind: "bin" } };
  }
  if (typeof c.tokenBin !== "string" || !/^\d{8}$/.test(c.tokenBin))
    throw new KeyVerificationError("card", "tokenBin must be the wallet token's first 8 digits");
  return { cardRef, bin: { digits: c.tokenBin, kind: "token-bin" } };
}

/** A lookup answer and the flag the seal needs beside the key-transparency members. */
export type NormalizedAnswer = KtLookupAnswer & { aadBound: boolean };

/**
 * Reads an answer in either form the client meets: the REST JSON (`data`: bytes as base64, numbers
 * as JSON numbers or int64 strings) or a generated message (bytes as `Uint8Array`, int64 as `bigint`,
 * absent messages `undefined`, absent strings and bytes empty). Anything malformed is refused here
 * with check `answer`, so `verifyLookup` only ever sees the wire shape it was written for.
 */
export function lookupAnswerOf(raw: unknown): NormalizedAnswer {
  const a = objectOf(raw, "the answer");
  const answer: NormalizedAnswer = {
    keyId: text(a.keyId, "keyId"),
    algorithm: text(a.algorithm, "algorithm"),
    publicKey: text(a.publicKey, "publicKey"),
    isEscrowed: a.isEscrowed === true,
    aadBound: a.aadBound === true,
    directory: directoryOf(a.directory),
  };
  const binding = signedOf(a.binding, "binding");
  if (binding !== undefined) answer.binding = binding;
  const rotation = signedOf(a.rootRotation, "rootRotation");
  if (rotation !== undefined) answer.rootRotation = rotation;
  if (present(a.opening)) answer.opening = bytes(a.opening, "opening");
  const proof = present(a.proof) ? objectOf(a.proof, "proof") : undefined;
  if (proof !== undefined && present(proof.checkpoint)) {
    answer.proof = {
      leafIndex: count(proof.leafIndex, "proof.leafIndex"),
      treeSize: count(proof.treeSize, "proof.treeSize"),
      inclusion: hashes(proof.inclusion, "proof.inclusion"),
      checkpoint: text(proof.checkpoint, "proof.checkpoint"),
    };
  }
  if (present(a.checkpoint)) answer.checkpoint = text(a.checkpoint, "checkpoint");
  return answer;
}

/** A signed statement member (`binding`, `rootRotation`), or undefined when absent or empty. */
function signedOf(raw: unknown, what: string): KtLookupAnswer["binding"] {
  const b = present(raw) ? objectOf(raw, what) : undefined;
  if (b === undefined || !present(b.statement)) return undefined;
  return {
    statement: bytes(b.statement, `${what}.statement`),
    signature: bytes(b.signature, `${what}.signature`),
    signingKeyId: text(b.signingKeyId, `${what}.signingKeyId`),
  };
}

function directoryOf(raw: unknown): KtLookupAnswer["directory"] {
  if (!present(raw)) throw new KeyVerificationError("answer", "the answer carries no directory proof");
  const d = objectOf(raw, "directory");
  return {
    index: count(d.index, "directory.index"),
    inclusion: hashes(d.inclusion, "directory.inclusion"),
    sha256: text(d.sha256, "directory.sha256"),
  };
}

/** Whether a member is there: not undefined/null, not an empty string or byte string. */
function present(value: unknown): boolean {
  if (value === undefined || value === null || value === "") return false;
  return !(value instanceof Uint8Array && value.length === 0);
}

function objectOf(value: unknown, what: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new KeyVerificationError("answer", `${what} is not an object`);
  return value as Record<string, unknown>;
}

function text(value: unknown, what: string): string {
  if (typeof value !== "string") throw new KeyVerificationError("answer", `${what} is not a string`);
  return value;
}

function bytes(value: unknown, what: string): string {
  if (value instanceof Uint8Array) return base64(value);
  return text(value, what);
}

function count(value: unknown, what: string): number {
  let n: number | undefined;
  if (typeof value === "number") n = value;
  else if (typeof value === "bigint" && value <= BigInt(Number.MAX_SAFE_INTEGER)) n = Number(value);
  else if (typeof value === "string" && /^(0|[1-9]\d{0,15})$/.test(value)) n = Number(value);
  if (n === undefined || !Number.isSafeInteger(n) || n < 0)
    throw new KeyVerificationError("answer", `${what} is not a non-negative integer`);
  return n;
}

function hashes(value: unknown, what: string): string[] {
  if (!Array.isArray(value) || value.length > 128)
    throw new KeyVerificationError("answer", `${what} is not a list of hashes`);
  return value.map((h, i) => bytes(h, `${what}[${i}]`));
}

/** The base URL with a trailing slash, so relative paths resolve under it (a path prefix is kept). */
function withSlash(url: URL): URL {
  return url.pathname.endsWith("/") ? url : new URL(`${url.href}/`);
}

/**
 * Snapshot bodies by SHA-256, fetched once: a body is kept only when its hash is the one asked for,
 * and concurrent seals of one snapshot share one fetch. Bounded: the oldest goes first.
 */
class SnapshotCache {
  private readonly bodies = new Map<string, Promise<string>>();

  constructor(
    private readonly limit: number,
    private readonly load: (sha256: string, signal?: AbortSignal) => Promise<string>,
  ) {}

  get(sha256: string, signal?: AbortSignal): Promise<string> {
    const hit = this.bodies.get(sha256);
    if (hit !== undefined) return hit;
    const loading = this.load(sha256, signal);
    if (this.bodies.size >= Math.max(1, this.limit))
      this.bodies.delete(this.bodies.keys().next().value as string);
    this.bodies.set(sha256, loading);
    loading.catch(() => this.bodies.delete(sha256));
    return loading;
  }
}

/** Reads a snapshot's body, refusing one that is too large, not UTF-8, or not the one asked for. */
async function fetchSnapshot(
  fetchFn: typeof globalThis.fetch,
  url: URL,
  sha256: string,
  signal: AbortSignal | undefined,
  limits: { maxBytes: number; timeoutMs: number },
): Promise<string> {
  // Not AbortSignal.timeout/any: React Native lacks them.
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(new Error("timed out")), limits.timeoutMs);
  const forward = () => abort.abort(signal?.reason);
  if (signal?.aborted) forward();
  signal?.addEventListener("abort", forward, { once: true });
  let body: Uint8Array;
  try {
    const response = await fetchFn(url, { signal: abort.signal, headers: { accept: "application/json" } });
    if (response.status !== 200) {
      throw new KeyVerificationError("fetch", `GET ${url.pathname} answered ${response.status}`);
    }
    body = await readCapped(response, limits.maxBytes);
  } catch (cause) {
    if (cause instanceof KeyVerificationError) throw cause;
    throw new KeyVerificationError("fetch", `could not read the directory snapshot from ${url.host}`, {
      cause,
    });
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", forward);
  }
  if (toHex(defaultSha256(body)) !== sha256) {
    throw new KeyVerificationError("directory", "the snapshot served is not the one the answer names");
  }
  const json = fromUtf8(body);
  if (json === undefined) throw new KeyVerificationError("directory", "the snapshot is not UTF-8");
  return json;
}

async function readCapped(response: Response, maxBytes: number): Promise<Uint8Array> {
  const declared = Number(response.headers.get("content-length") ?? "0");
  if (declared > maxBytes) throw new KeyVerificationError("fetch", "the snapshot is too large");
  if (response.body === null) return new Uint8Array(await response.arrayBuffer());
  const reader = response.body.getReader();
  const parts: Uint8Array[] = [];
  let length = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    length += value.length;
    if (length > maxBytes) {
      await reader.cancel();
      throw new KeyVerificationError("fetch", "the snapshot is too large");
    }
    parts.push(value);
  }
  const out = new Uint8Array(length);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}
