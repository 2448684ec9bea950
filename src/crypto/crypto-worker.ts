import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { setPriority } from "node:os";
import { parentPort, workerData } from "node:worker_threads";
import { AppError, invalidRequest } from "../errors.js";
import { useFastPaths } from "../fast-paths.js";
import type { WorkerInit, WorkerRequest, WorkerResponse, WorkerTask, WrapTarget } from "./crypto-protocol.js";
import { packKeyPair, packSealedText, packWrappedKey, serializeError } from "./crypto-protocol.js";
import {
  openSealedReceipt,
  proveAesKey,
  type SealedReceipt,
  sealReceipt,
  unwrapAesKey,
  wrapAesKey,
} from "./envelope.js";
import { ESCROW_KEY_UNKNOWN, ESCROW_UNWRAP_FAILED } from "./escrow-errors.js";
import { escrowKeyIdOf } from "./escrow-keys.js";
import {
  type CryptoKey,
  hpkeKeyPairOf,
  hpkeUnwrap,
  hpkeWrap,
  importHpkePublicKey,
  openSealedReceiptHpke,
  sealReceiptHpke,
} from "./hpke.js";
import { privateKeyIsConsistent } from "./key-consistency.js";
import {
  keyAlgorithmOf,
  PublicKeyCache,
  parsePrivateKey,
  privateKeyMatches,
  RSA_MODULUS_BITS,
  RSA_PUBLIC_EXPONENT,
  spkiOfPrivateKey,
} from "./keys.js";
import {
  bundleSuite,
  type EcCurve,
  HPKE_P256,
  HPKE_SUITE,
  type KeyAlgorithm,
  type KeySuite,
  RSA_OAEP_256,
} from "./suites.js";

/**
 * The body of a `CryptoPool` worker thread: every private-key operation of the server runs here, off
 * the event loop, and so does the sealing of new receipts and request-driven key generation (on
 * workers of lower priority). A message carries the requests of one event-loop turn of the main
 * thread. RSA seals take tens of microseconds, and their answers go back together, one message for a
 * run of them (a message costs both threads more than a seal's wait for the others); anything slower
 * is answered on its own as soon as it is done. HPKE tasks are asynchronous (WebCrypto): each is
 * answered on its own when it settles, possibly after tasks that came later, which the pool matches by
 * id. No exception or rejection escapes, so a worker only dies when it is terminated or the runtime fails.
 */

const port = parentPort;
if (port === null) throw new Error("crypto-worker must run in a worker thread");

const init = workerData as WorkerInit;
useFastPaths(init.fastPaths);
// Linux keeps a nice value per thread, so this lowers this worker only (elsewhere it would be the
// whole process: skipped there).
if (init.niceness !== undefined && process.platform === "linux") {
  try {
    setPriority(init.niceness);
  } catch {
    // Not allowed here: run at the default priority.
  }
}

/** Recipients' public keys, parsed once per worker (and validated by `parsePublicKey` on a miss). */
const publicKeys = new PublicKeyCache();

/** HPKE recipients' keys as WebCrypto keys, imported once per worker; bounded like `publicKeys`. */
const hpkeKeys = new Map<string, Promise<CryptoKey>>();
const MAX_HPKE_KEYS = 10_000;

/** The escrow keys by id, with their suite read from the key; parsed on first use. */
let escrowKeys: Map<string, { key: KeyObject; algorithm: KeyAlgorithm }> | undefined;
function escrowKey(escrowKeyId: string): { key: KeyObject; algorithm: KeyAlgorithm } | undefined {
  if (escrowKeys === undefined) {
    // Built whole before it is kept, so a key that fails to parse (the pool checked them all) leaves none half-read.
    const keys = new Map<string, { key: KeyObject; algorithm: KeyAlgorithm }>();
    init.escrowPrivateKeys.forEach((text, i) => {
      const key = parsePrivateKey(text, `escrowPrivateKeys[${i}]`);
      keys.set(escrowKeyIdOf(spkiOfPrivateKey(key)), { key, algorithm: keyAlgorithmOf(key) });
    });
    escrowKeys = keys;
  }
  return escrowKeys.get(escrowKeyId);
}

type Output = Uint8Array | string;

type OpenTask = Extract<WorkerTask, { op: "open" }>;
type RewrapTask = Extract<WorkerTask, { op: "rewrap" }>;

/**
 * What each key suite does in this worker: its entry of the suite registry for Node's crypto (the
 * facts are in `suites.ts`). The record is keyed by every suite's name, so a new suite does not
 * compile until it has its operations. RSA work is synchronous (a run of seals is answered in one
 * message); HPKE work is asynchronous (WebCrypto).
 */
interface SuiteCrypto {
  /** Seals a receipt's plaintext to `target`, bound to `aad`. */
  seal(plaintext: Buffer, aad: Buffer, target: WrapTarget): Output | Promise<Output>;
  /** Opens a receipt with its recipient's private key (checked to be the recipient's). */
  open(sealed: SealedReceipt, task: OpenTask, privateKey: KeyObject): Output | Promise<Output>;
  /** Unwraps an escrowed receipt's AES key with the escrow key. */
  unwrap(escrowKey: KeyObject, task: RewrapTask): Buffer | Promise<Buffer>;
  /** Wraps a receipt's AES key to `target`, bound to `aad` as the suite binds. */
  wrap(aesKey: Buffer, target: WrapTarget, aad: Uint8Array): Output | Promise<Output>;
  /** A fresh key pair, DER (SPKI, PKCS#8). */
  generate(): { publicKey: Buffer; privateKey: Buffer };
}

/** RSA-OAEP-256: synchronous, Node's RSA-OAEP. */
const RSA_CRYPTO: SuiteCrypto = {
  seal: (plaintext, aad, target) =>
    packSealedText(
      sealReceipt(plaintext, aad, publicKeys.get(target.keyId, target.spki), target.aadBound === true),
    ),
  open: (sealed, task, privateKey) => openSealedReceipt(sealed, task.aad, privateKey, task.aadBound === true),
  unwrap: (escrowKey, task) =>
    unwrapAesKey(task.encryptedAesKey, escrowKey, task.aadBound === true ? task.aad : undefined),
  wrap: (aesKey, target, aad) => {
    const key = publicKeys.get(target.keyId, target.spki);
    return packWrappedKey({
      encryptedAesKey: wrapAesKey(aesKey, key, target.aadBound === true ? aad : undefined),
    });
  },
  generate: () =>
    generateKeyPairSync("rsa", {
      modulusLength: RSA_MODULUS_BITS,
      publicExponent: RSA_PUBLIC_EXPONENT,
      publicKeyEncoding: { type: "spki", format: "der" },
      privateKeyEncoding: { type: "pkcs8", format: "der" },
    }),
};

/** An HPKE suite (its KEM, KDF, AEAD and curve from its registry object): asynchronous, WebCrypto. */
function hpkeCrypto(suite: KeySuite): SuiteCrypto {
  const namedCurve = (suite.curve as EcCurve).name;
  return {
    seal: (plaintext, aad, target) =>
      hpkeKey(target, suite).then(async (key) =>
        packSealedText(await sealReceiptHpke(plaintext, aad, key, suite)),
      ),
    open: (sealed, task, privateKey) =>
      hpkeKeyPairOf(privateKey, suite).then((pair) => openSealedReceiptHpke(sealed, task.aad, pair, suite)),
    unwrap: async (escrowKey, task) =>
      hpkeUnwrap(await hpkeKeyPairOf(escrowKey, suite), task, task.aad, suite),
    wrap: async (aesKey, target, aad) =>
      packWrappedKey(await hpkeWrap(aesKey, await hpkeKey(target, suite), aad, suite)),
    generate: () =>
      generateKeyPairSync("ec", {
        namedCurve,
        publicKeyEncoding: { type: "spki", format: "der" },
        privateKeyEncoding: { type: "pkcs8", format: "der" },
      }),
  };
}

const SUITE_CRYPTO: Readonly<Record<KeyAlgorithm, SuiteCrypto>> = {
  [RSA_OAEP_256]: RSA_CRYPTO,
  [HPKE_P256]: hpkeCrypto(HPKE_SUITE),
};

port.on("message", (requests: WorkerRequest[]) => {
  let answers: WorkerResponse[] = [];
  const send = () => {
    if (answers.length === 0) return;
    post(answers);
    answers = [];
  };
  for (const request of requests) {
    const outcome = answer(request);
    if (outcome instanceof Promise) {
      // Answered on its own when it settles; `answer` never rejects.
      void outcome.then((response) => post([response]));
      continue;
    }
    const quick = request.op === "seal";
    if (!quick) send();
    answers.push(outcome);
    if (!quick) send();
  }
  send();
});

/** Posts answers; the message holds a copy, and this thread's is wiped (a private key, a plaintext). */
function post(answers: WorkerResponse[]): void {
  port?.postMessage(answers);
  for (const answer of answers) if (answer.ok && typeof answer.result !== "string") answer.result.fill(0);
}

/** The answer to a request: at once for synchronous (RSA) work, as a promise that never rejects otherwise. */
function answer(request: WorkerRequest): WorkerResponse | Promise<WorkerResponse> {
  const failed = (error: unknown): WorkerResponse => ({
    id: request.id,
    ok: false,
    error: serializeError(error),
  });
  try {
    const output = run(request);
    if (output instanceof Promise) return output.then((value) => succeeded(request.id, value), failed);
    return succeeded(request.id, output);
  } catch (error) {
    return failed(error);
  }
}

function succeeded(id: number, output: Output): WorkerResponse {
  if (
    typeof output === "string" ||
    (output.byteOffset === 0 && output.byteLength === output.buffer.byteLength)
  ) {
    return { id, ok: true, result: output };
  }
  // A view of a shared buffer (Node's Buffer pool): a message would carry the whole buffer.
  const result = new Uint8Array(output);
  output.fill(0);
  return { id, ok: true, result };
}

function run(task: WorkerTask): Output | Promise<Output> {
  switch (task.op) {
    case "open":
      return open(task);
    case "seal": {
      const plaintext = Buffer.from(task.plaintext, "utf8");
      const aad = Buffer.from(task.aad, "utf8");
      return SUITE_CRYPTO[targetAlgorithm(task)].seal(plaintext, aad, task);
    }
    case "rewrap":
      return rewrap(task);
    case "generate":
      return generate(task.algorithm);
  }
}

function open(task: Extract<WorkerTask, { op: "open" }>): Output | Promise<Output> {
  const privateKey = parsePrivateKey(task.privateKey, "privateKey");
  // The key must be the grant's key before any receipt byte is touched (README, "The sealed receipt"): its
  // public half, and a secret half that belongs to that public half (a forged key carries the right public
  // half).
  if (!privateKeyMatches(privateKey, task.expectedSpki) || !privateKeyIsConsistent(privateKey)) {
    throw new AppError("forbidden", "The private key does not match the key of this grant.");
  }
  const algorithm = keyAlgorithmOf(privateKey, "privateKey");
  const bundle = bundleSuite(task.algorithm, task.encapsulatedKey !== undefined).algorithm;
  if (bundle !== algorithm) {
    throw new AppError(
      "forbidden",
      `The private key is a key of the ${algorithm} suite; this receipt's key is wrapped with ${bundle}.`,
    );
  }
  const sealed: SealedReceipt = {
    encryptedAesKey: asBuffer(task.encryptedAesKey),
    iv: asBuffer(task.iv),
    ciphertext: asBuffer(task.ciphertext),
    authTag: asBuffer(task.authTag),
  };
  if (task.encapsulatedKey !== undefined) sealed.encapsulatedKey = asBuffer(task.encapsulatedKey);
  return SUITE_CRYPTO[algorithm].open(sealed, task, privateKey);
}

/**
 * Escrow release: unwraps a receipt's AES key with the escrow key `escrowKeyId` (its suite read from
 * the key; an RSA wrap marked `aadBound` with the receipt's AAD as OAEP label), proves that the key is
 * this receipt's own (its AES-GCM tag authenticates under the receipt's AAD), and only then wraps it
 * to the target, of either suite. Without the proof the escrow key would be a decryption oracle: a
 * bundle lifted from another receipt, planted under a card the planter registers, would come back
 * re-wrapped to the planter. An unknown escrow key is `conflict` with {@link ESCROW_KEY_UNKNOWN}; a
 * failed unwrap or proof with {@link ESCROW_UNWRAP_FAILED}: the receipt stays escrowed.
 * A target key that does not parse is `invalid_request`.
 */
async function rewrap(task: Extract<WorkerTask, { op: "rewrap" }>): Promise<Output> {
  const algorithm = targetAlgorithm(task.target);
  const escrow = escrowKey(task.escrowKeyId);
  if (escrow === undefined) throw new AppError("conflict", ESCROW_KEY_UNKNOWN);
  let aesKey: Buffer | undefined;
  try {
    aesKey = await SUITE_CRYPTO[escrow.algorithm].unwrap(escrow.key, task);
    proveAesKey(aesKey, sealedPartsOf(task), task.aad);
  } catch (cause) {
    aesKey?.fill(0);
    throw new AppError("conflict", ESCROW_UNWRAP_FAILED, { cause });
  }
  try {
    return await SUITE_CRYPTO[algorithm].wrap(aesKey, task.target, task.aad);
  } finally {
    aesKey.fill(0);
  }
}

/** The AES-GCM parts of a rewrap task, as Buffers over the cloned bytes. */
function sealedPartsOf(task: Extract<WorkerTask, { op: "rewrap" }>) {
  return { iv: asBuffer(task.iv), ciphertext: asBuffer(task.ciphertext), authTag: asBuffer(task.authTag) };
}

/** A fresh key pair of the suite, packed: RSA-2048 (e = 65537), or P-256 (cheap, but kept off the event loop too). */
function generate(algorithm: KeyAlgorithm): Output {
  const pair = SUITE_CRYPTO[algorithm].generate();
  const packed = packKeyPair(pair.publicKey, pair.privateKey);
  pair.privateKey.fill(0);
  return packed;
}

/**
 * The suite of a recipient key (parsed and validated once per worker, see `PublicKeyCache`); a
 * caller's `algorithm` that names the other suite is `invalid_request`.
 */
function targetAlgorithm(target: WrapTarget): KeyAlgorithm {
  const algorithm = keyAlgorithmOf(publicKeys.get(target.keyId, target.spki), "publicKey");
  if (target.algorithm !== undefined && target.algorithm !== algorithm) {
    throw invalidRequest([{ field: "algorithm", description: `must be ${algorithm} for this key` }]);
  }
  return algorithm;
}

/** The WebCrypto key of an HPKE recipient, imported once per worker. */
function hpkeKey(target: WrapTarget, suite: KeySuite): Promise<CryptoKey> {
  const cacheKey = `${target.keyId}\n${target.spki}`;
  let key = hpkeKeys.get(cacheKey);
  if (key === undefined) {
    key = importHpkePublicKey(target.spki, suite);
    // A failed import is not kept: the next call tries again.
    key.catch(() => hpkeKeys.delete(cacheKey));
    hpkeKeys.set(cacheKey, key);
    if (hpkeKeys.size > MAX_HPKE_KEYS) {
      const oldest = hpkeKeys.keys().next();
      if (oldest.done !== true) hpkeKeys.delete(oldest.value);
    }
  }
  return key;
}

/** A Buffer view of cloned bytes, without copying. */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
