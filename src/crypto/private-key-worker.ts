import { parentPort, workerData } from "node:worker_threads";
import { AppError } from "../errors.js";
import { openSealedReceipt, rewrapAesKey } from "./envelope.js";
import { parsePrivateKey, parsePublicKey, spkiOfPrivateKey } from "./keys.js";
import type { WorkerInit, WorkerRequest, WorkerResponse, WorkerTask } from "./private-key-protocol.js";
import { serializeError } from "./private-key-protocol.js";

/**
 * The body of a `PrivateKeyPool` worker thread: every RSA private-key operation of the server runs
 * here, off the event loop. It answers each request with exactly one response and never lets an
 * exception escape, so a worker only dies when it is terminated or the runtime fails.
 */

const port = parentPort;
if (port === null) throw new Error("private-key-worker must run in a worker thread");

const escrowPrivateKey = parsePrivateKey((workerData as WorkerInit).escrowPrivateKey, "escrowPrivateKey");

port.on("message", (request: WorkerRequest) => {
  let response: WorkerResponse;
  let transfer: ArrayBuffer[] = [];
  try {
    const result = new Uint8Array(run(request));
    response = { id: request.id, ok: true, result };
    transfer = [result.buffer];
  } catch (error) {
    response = { id: request.id, ok: false, error: serializeError(error) };
  }
  port.postMessage(response, transfer);
});

function run(task: WorkerTask): Buffer {
  switch (task.op) {
    case "open": {
      const privateKey = parsePrivateKey(task.privateKey, "privateKey");
      // The key must be the grant's key before any receipt byte is touched (section 5).
      if (spkiOfPrivateKey(privateKey) !== task.expectedSpki) {
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
    case "rewrap":
      return rewrapAesKey(task.encryptedAesKey, escrowPrivateKey, parsePublicKey(task.toSpki).key);
  }
}

/** A Buffer view of cloned bytes, without copying. */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
