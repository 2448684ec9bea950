import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { setPriority } from "node:os";
import { parentPort, workerData } from "node:worker_threads";
import { AppError } from "../errors.js";
import type { WorkerInit, WorkerRequest, WorkerResponse, WorkerTask } from "./crypto-protocol.js";
import { packKeyPair, packSealedText, serializeError } from "./crypto-protocol.js";
import { openSealedReceipt, rewrapAesKey, sealReceipt } from "./envelope.js";
import {
  PublicKeyCache,
  parsePrivateKey,
  privateKeyMatches,
  RSA_MODULUS_BITS,
  RSA_PUBLIC_EXPONENT,
} from "./keys.js";

/**
 * The body of a `CryptoPool` worker thread: every RSA private-key operation of the server runs
 * here, off the event loop, and so does the sealing of new receipts and request-driven key generation
 * (on workers of lower priority). A message carries the requests of one event-loop turn of the main
 * thread. Seals take tens of microseconds, and their answers go back together, one message for a run of
 * them (a message costs both threads more than a seal's wait for the others); anything slower is
 * answered on its own as soon as it is done. No exception escapes, so a worker only dies when it is
 * terminated or the runtime fails.
 */

const port = parentPort;
if (port === null) throw new Error("crypto-worker must run in a worker thread");

const init = workerData as WorkerInit;
// Linux keeps a nice value per thread, so this lowers this worker only (elsewhere it would be the
// whole process: skipped there).
if (init.niceness !== undefined && process.platform === "linux") {
  try {
    setPriority(init.niceness);
  } catch {
    // Not allowed here: run at the default priority.
  }
}

/** Recipients' public keys, parsed once per worker. */
const publicKeys = new PublicKeyCache();

let escrowPrivateKey: KeyObject | undefined;
function escrowKey(): KeyObject {
  escrowPrivateKey ??= parsePrivateKey(init.escrowPrivateKey, "escrowPrivateKey");
  return escrowPrivateKey;
}

port.on("message", (requests: WorkerRequest[]) => {
  let answers: WorkerResponse[] = [];
  const send = () => {
    if (answers.length === 0) return;
    port.postMessage(answers);
    // The message holds a copy; this thread's is wiped (a generated private key, a receipt's plaintext).
    for (const answer of answers) if (answer.ok && typeof answer.result !== "string") answer.result.fill(0);
    answers = [];
  };
  for (const request of requests) {
    const quick = request.op === "seal";
    if (!quick) send();
    answers.push(answer(request));
    if (!quick) send();
  }
  send();
});

function answer(request: WorkerRequest): WorkerResponse {
  try {
    const output = run(request);
    if (
      typeof output === "string" ||
      (output.byteOffset === 0 && output.byteLength === output.buffer.byteLength)
    ) {
      return { id: request.id, ok: true, result: output };
    }
    // A view of a shared buffer (Node's Buffer pool): a message would carry the whole buffer.
    const result = new Uint8Array(output);
    output.fill(0);
    return { id: request.id, ok: true, result };
  } catch (error) {
    return { id: request.id, ok: false, error: serializeError(error) };
  }
}

function run(task: WorkerTask): Uint8Array | string {
  switch (task.op) {
    case "open": {
      const privateKey = parsePrivateKey(task.privateKey, "privateKey");
      // The key must be the grant's key before any receipt byte is touched (section 5).
      if (!privateKeyMatches(privateKey, task.expectedSpki)) {
        throw new AppError("forbidden", "The private key does not match the key of this grant.");
      }
      const sealed = {
        encryptedAesKey: asBuffer(task.encryptedAesKey),
        iv: asBuffer(task.iv),
        ciphertext: asBuffer(task.ciphertext),
        authTag: asBuffer(task.authTag),
      };
      return openSealedReceipt(sealed, task.aad, privateKey);
    }
    case "seal": {
      const plaintext = Buffer.from(task.plaintext, "utf8");
      const aad = Buffer.from(task.aad, "utf8");
      return packSealedText(sealReceipt(plaintext, aad, publicKeys.get(task.keyId, task.spki)));
    }
    case "rewrap":
      return rewrapAesKey(task.encryptedAesKey, escrowKey(), publicKeys.get(task.keyId, task.spki));
    case "generate": {
      const pair = generateKeyPairSync("rsa", {
        modulusLength: RSA_MODULUS_BITS,
        publicExponent: RSA_PUBLIC_EXPONENT,
        publicKeyEncoding: { type: "spki", format: "der" },
        privateKeyEncoding: { type: "pkcs8", format: "der" },
      });
      const packed = packKeyPair(pair.publicKey, pair.privateKey);
      pair.privateKey.fill(0);
      return packed;
    }
  }
}

/** A Buffer view of cloned bytes, without copying. */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
