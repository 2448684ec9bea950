import { type KeyObject, privateDecrypt } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import type { Worker } from "node:worker_threads";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CryptoPool, KEYGEN_NICENESS, TURN_BATCH } from "../../src/crypto/crypto-pool.js";
import { packSealedText, unpackSealedText, type WorkerResponse } from "../../src/crypto/crypto-protocol.js";
import {
  openSealedReceipt,
  type ReceiptIdentity,
  receiptAad,
  receiptAadText,
  type SealedReceiptText,
  sealedFromText,
  sealReceipt,
} from "../../src/crypto/envelope.js";
import { ESCROW_UNWRAP_FAILED, isEscrowHold } from "../../src/crypto/escrow-errors.js";
import {
  generateRsaKeyPair,
  parsePrivateKey,
  parsePublicKey,
  privateKeyMatches,
  type RsaKeyPair,
} from "../../src/crypto/keys.js";
import { AppError } from "../../src/errors.js";

let user: RsaKeyPair;
let stranger: RsaKeyPair;
let escrow: RsaKeyPair;
let userKey: KeyObject;
let pool: CryptoPool;

const identity: ReceiptIdentity = {
  version: "1.0",
  receiptId: "r-1",
  merchantId: "m-1",
  transactionId: "t-1",
};
const aad = receiptAad(identity);
const aadText = receiptAadText(identity);

beforeAll(async () => {
  [user, stranger, escrow] = await Promise.all([
    generateRsaKeyPair(),
    generateRsaKeyPair(),
    generateRsaKeyPair(),
  ]);
  userKey = parsePublicKey(user.publicKey).key;
  pool = new CryptoPool({ size: 2, escrowPrivateKeys: [escrow.privateKey] });
  // One at a time: a turn's tasks go to one worker, and the next turn to the other, idle one.
  for (const _ of [0, 1]) await openForUser(Buffer.from("warm-up"));
});

afterAll(async () => {
  await pool.close();
});

function openForUser(plaintext: Buffer, target = pool): Promise<Buffer> {
  const sealed = sealReceipt(plaintext, aad, userKey);
  return target.openReceipt({ privateKey: user.privateKey, expectedSpki: user.publicKey, sealed, aad });
}

async function rejection(promise: Promise<unknown>): Promise<AppError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(AppError);
  return error as AppError;
}

/** The worker threads of a pool; only the crash test reaches in, to kill one. */
function workersOf(target: CryptoPool): (Worker | undefined)[] {
  return (target as unknown as { slots: { worker: Worker | undefined }[] }).slots.map((slot) => slot.worker);
}

describe("CryptoPool.openReceipt", () => {
  it("decrypts a receipt with the owner's private key, base64 DER or PEM", async () => {
    const plaintext = Buffer.from('{"receiptId":"r-1","totalAmount":1250}');
    expect((await openForUser(plaintext)).equals(plaintext)).toBe(true);
    const pem = parsePrivateKey(user.privateKey).export({ type: "pkcs8", format: "pem" }).toString();
    const sealed = sealReceipt(plaintext, aad, userKey);
    const opened = await pool.openReceipt({ privateKey: pem, expectedSpki: user.publicKey, sealed, aad });
    expect(opened.equals(plaintext)).toBe(true);
  });

  it("refuses another key with forbidden before touching the receipt", async () => {
    const sealed = sealReceipt(Buffer.from("secret"), aad, userKey);
    // The receipt is corrupted too: reaching decryption would give internal_server_error, not forbidden.
    const corrupted = { ...sealed, authTag: Buffer.alloc(16), encryptedAesKey: Buffer.alloc(3) };
    const error = await rejection(
      pool.openReceipt({
        privateKey: stranger.privateKey,
        expectedSpki: user.publicKey,
        sealed: corrupted,
        aad,
      }),
    );
    expect(error.code).toBe("forbidden");
    expect(error.message).toBe("The private key does not match the key of this grant.");
  });

  it("answers invalid_request on privateKey for a key that does not parse, without echoing it", async () => {
    const sealed = sealReceipt(Buffer.from("secret"), aad, userKey);
    const broken = user.privateKey.slice(0, 600);
    for (const privateKey of [broken, user.publicKey, "not a key"]) {
      const error = await rejection(
        pool.openReceipt({ privateKey, expectedSpki: user.publicKey, sealed, aad }),
      );
      expect(error.code).toBe("invalid_request");
      expect(error.violations.map((v) => v.field)).toEqual(["privateKey"]);
      const shown = JSON.stringify({
        message: error.message,
        details: error.details,
        cause: String(error.cause),
      });
      for (const part of [privateKey.slice(0, 40), privateKey.slice(200, 240)].filter((p) => p.length > 0)) {
        expect(shown).not.toContain(part);
      }
    }
  });

  it("reports a receipt that fails its integrity check with the right key as integrity_failure (422)", async () => {
    const sealed = sealReceipt(Buffer.from("secret"), aad, userKey);
    const tampered = { ...sealed, ciphertext: Buffer.from(sealed.ciphertext).fill(0) };
    const error = await rejection(
      pool.openReceipt({ privateKey: user.privateKey, expectedSpki: user.publicKey, sealed: tampered, aad }),
    );
    expect(error.code).toBe("integrity_failure");
    expect(error.message).not.toContain("secret");
    expect(error.message).not.toContain(user.privateKey.slice(100, 140));
  });

  it("answers 50 concurrent calls, each with its own plaintext", async () => {
    const plaintexts = Array.from({ length: 50 }, (_, i) => Buffer.from(`receipt number ${i}`));
    const opened = await Promise.all(plaintexts.map((p) => openForUser(p)));
    expect(opened.map((b) => b.toString())).toEqual(plaintexts.map((b) => b.toString()));
  });

  it("leaves the caller's buffers intact (only copies are transferred)", async () => {
    const sealed = sealReceipt(Buffer.from("intact"), aad, userKey);
    const before = Buffer.concat([sealed.encryptedAesKey, sealed.iv, sealed.ciphertext, sealed.authTag, aad]);
    await pool.openReceipt({ privateKey: user.privateKey, expectedSpki: user.publicKey, sealed, aad });
    const after = Buffer.concat([sealed.encryptedAesKey, sealed.iv, sealed.ciphertext, sealed.authTag, aad]);
    expect(after.equals(before)).toBe(true);
  });

  it("keeps the event loop responsive while it decrypts", async () => {
    const envelopes = Array.from({ length: 40 }, (_, i) => sealReceipt(Buffer.from(`r${i}`), aad, userKey));
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    await Promise.all(
      envelopes.map((sealed) =>
        pool.openReceipt({ privateKey: user.privateKey, expectedSpki: user.publicKey, sealed, aad }),
      ),
    );
    const duringPool = ticks;
    // Control: the same work on the event loop lets no timer run at all.
    const privateKey = parsePrivateKey(user.privateKey);
    ticks = 0;
    for (const sealed of envelopes) openSealedReceipt(sealed, aad, privateKey);
    const duringInline = ticks;
    clearInterval(timer);
    expect(duringInline).toBe(0);
    expect(duringPool).toBeGreaterThanOrEqual(3);
  });
});

describe("CryptoPool.seal", () => {
  const request = (plaintext: string, recipient = user) => ({
    plaintext,
    aad: aadText,
    keyId: "key_user",
    spki: recipient.publicKey,
  });

  it("seals a receipt that opens with the recipient's private key, bound to its AAD", async () => {
    const plaintext = '{"receiptId":"r-1","merchantName":"Café Zoë ☕"}';
    const text = await pool.seal(request(plaintext));
    // The parts come as canonical base64, the form the store keeps.
    for (const part of Object.values(text)) {
      expect(Buffer.from(part, "base64").toString("base64")).toBe(part);
    }
    const sealed = sealedFromText(text);
    expect(sealed.encryptedAesKey.length).toBe(256);
    expect(sealed.iv.length).toBe(12);
    expect(sealed.authTag.length).toBe(16);
    expect(sealed.ciphertext.length).toBe(Buffer.byteLength(plaintext, "utf8"));
    const privateKey = parsePrivateKey(user.privateKey);
    expect(openSealedReceipt(sealed, aad, privateKey).toString("utf8")).toBe(plaintext);
    const other = receiptAad({ ...identity, receiptId: "r-2" });
    expect(() => openSealedReceipt(sealed, other, privateKey)).toThrow(AppError);
    expect(() => openSealedReceipt(sealed, aad, parsePrivateKey(stranger.privateKey))).toThrow(AppError);
  });

  it("draws a new AES key and IV for every receipt, also for the same plaintext", async () => {
    const [a, b] = (await Promise.all([pool.seal(request("same")), pool.seal(request("same"))])).map(
      sealedFromText,
    );
    expect(a?.iv.equals(b?.iv as Buffer)).toBe(false);
    expect(a?.ciphertext.equals(b?.ciphertext as Buffer)).toBe(false);
    const privateKey = parsePrivateKey(user.privateKey);
    const keys = [a, b].map((s) =>
      privateDecrypt({ key: privateKey, oaepHash: "sha256" }, s?.encryptedAesKey as Buffer),
    );
    expect(keys[0]?.length).toBe(32);
    expect(keys[0]?.equals(keys[1] as Buffer)).toBe(false);
  });

  it("answers 50 concurrent calls to two recipients, each sealed to its own key", async () => {
    const requests = Array.from({ length: 50 }, (_, i) =>
      request(`receipt number ${i}`, i % 2 === 0 ? user : stranger),
    );
    const sealed = (await Promise.all(requests.map((r) => pool.seal(r)))).map(sealedFromText);
    const keys = [parsePrivateKey(user.privateKey), parsePrivateKey(stranger.privateKey)];
    const opened = sealed.map((s, i) => openSealedReceipt(s, aad, keys[i % 2] as KeyObject).toString());
    expect(opened).toEqual(requests.map((r) => r.plaintext));
  });

  it("binds the receipt to its AAD text encoded as UTF-8", async () => {
    const accented = { ...identity, merchantId: "Café Zoë ☕" };
    const sealed = sealedFromText(await pool.seal({ ...request("x"), aad: receiptAadText(accented) }));
    const privateKey = parsePrivateKey(user.privateKey);
    expect(openSealedReceipt(sealed, receiptAad(accented), privateKey).toString()).toBe("x");
    const latin1 = Buffer.from(receiptAadText(accented), "latin1");
    expect(() => openSealedReceipt(sealed, latin1, privateKey)).toThrow(AppError);
  });

  it("refuses a recipient key that does not parse with invalid_request, without echoing it", async () => {
    const error = await rejection(pool.seal({ ...request("x"), spki: "not-a-key-at-all" }));
    expect(error.code).toBe("invalid_request");
    expect(error.message).not.toContain("not-a-key-at-all");
  });

  it("runs on a worker: a closed pool refuses to seal", async () => {
    const closed = new CryptoPool({ size: 1, escrowPrivateKeys: [escrow.privateKey] });
    await closed.close();
    expect((await rejection(closed.seal(request("x")))).code).toBe("service_unavailable");
  });
});

describe("CryptoPool.rewrapFromEscrow", () => {
  const escrowKeyId = () => pool.escrowKeys[0]?.keyId ?? "";

  it("re-wraps an escrowed key to the user's key; the ciphertext stays the same and opens", async () => {
    const plaintext = Buffer.from("escrowed receipt");
    const sealed = sealReceipt(plaintext, aad, parsePublicKey(escrow.publicKey).key);
    const ciphertext = Buffer.from(sealed.ciphertext);
    const rewrapped = await pool.rewrapFromEscrow({
      escrowKeyId: escrowKeyId(),
      encryptedAesKey: sealed.encryptedAesKey,
      sealed: sealed,
      aad,
      target: { keyId: "user", spki: user.publicKey },
    });
    expect(rewrapped.encapsulatedKey).toBeUndefined();
    const encryptedAesKey = Buffer.from(rewrapped.encryptedAesKey, "base64");
    expect(encryptedAesKey.equals(sealed.encryptedAesKey)).toBe(false);
    const released = { ...sealed, encryptedAesKey };
    expect(released.ciphertext.equals(ciphertext)).toBe(true);
    const opened = await pool.openReceipt({
      privateKey: user.privateKey,
      expectedSpki: user.publicKey,
      sealed: released,
      aad,
    });
    expect(opened.equals(plaintext)).toBe(true);
    expect(() => privateDecrypt(parsePrivateKey(escrow.privateKey), encryptedAesKey)).toThrow();
  });

  it("refuses a target key that is not a usable public key", async () => {
    const sealed = sealReceipt(Buffer.from("x"), aad, parsePublicKey(escrow.publicKey).key);
    const error = await rejection(
      pool.rewrapFromEscrow({
        escrowKeyId: escrowKeyId(),
        encryptedAesKey: sealed.encryptedAesKey,
        sealed: sealed,
        aad,
        target: { keyId: "junk", spki: "junk" },
      }),
    );
    expect(error.code).toBe("invalid_request");
  });

  it("answers a key not wrapped to the escrow key with a hold (conflict), not a crash", async () => {
    const sealed = sealReceipt(Buffer.from("x"), aad, userKey);
    const error = await rejection(
      pool.rewrapFromEscrow({
        escrowKeyId: escrowKeyId(),
        encryptedAesKey: sealed.encryptedAesKey,
        sealed: sealed,
        aad,
        target: { keyId: "user", spki: user.publicKey },
      }),
    );
    expect(error.code).toBe("conflict");
    expect(isEscrowHold(error)).toBe(true);
  });
});

describe("CryptoPool.rewrapFromEscrow never re-wraps a key that is not its receipt's own", () => {
  const escrowKeyId = () => pool.escrowKeys[0]?.keyId ?? "";
  const escrowPublic = () => parsePublicKey(escrow.publicKey).key;
  const otherAad = receiptAad({ ...identity, receiptId: "planted" });

  it("holds a wrapped key lifted from another receipt, with that receipt's ciphertext or any other", async () => {
    const victim = sealReceipt(Buffer.from("the victim's receipt"), aad, escrowPublic());
    const decoy = sealReceipt(Buffer.from("the planter's own"), otherAad, escrowPublic());
    const target = { keyId: "mallory", spki: stranger.publicKey };
    const planted = [
      // The victim's wrapped key beside made-up AES-GCM parts, under the planter's receipt ids.
      { sealed: decoy, aad: otherAad },
      // The victim's wrapped key and ciphertext, under the planter's receipt ids.
      { sealed: victim, aad: otherAad },
    ];
    for (const { sealed, aad: plantedAad } of planted) {
      const error = await rejection(
        pool.rewrapFromEscrow({
          escrowKeyId: escrowKeyId(),
          encryptedAesKey: victim.encryptedAesKey,
          sealed,
          aad: plantedAad,
          target,
        }),
      );
      expect(error.message).toBe(ESCROW_UNWRAP_FAILED);
      expect(isEscrowHold(error)).toBe(true);
    }
  });

  it("unwraps an AAD-bound bundle with its label only, and binds the new wrap when the target asks", async () => {
    const sealed = sealReceipt(Buffer.from("bound"), aad, escrowPublic(), true);
    const release = (aadBound: boolean, targetBound: boolean) =>
      pool.rewrapFromEscrow({
        escrowKeyId: escrowKeyId(),
        aadBound,
        encryptedAesKey: sealed.encryptedAesKey,
        sealed,
        aad,
        target: { keyId: "user", spki: user.publicKey, aadBound: targetBound },
      });
    expect((await rejection(release(false, false))).message).toBe(ESCROW_UNWRAP_FAILED);
    const open = async (aadBound: boolean, wrapped: string) =>
      pool.openReceipt({
        privateKey: user.privateKey,
        expectedSpki: user.publicKey,
        sealed: { ...sealed, encryptedAesKey: Buffer.from(wrapped, "base64") },
        aadBound,
        aad,
      });
    const plain = await release(true, false);
    expect((await open(false, plain.encryptedAesKey)).toString()).toBe("bound");
    const bound = await release(true, true);
    expect((await open(true, bound.encryptedAesKey)).toString()).toBe("bound");
    expect((await rejection(open(false, bound.encryptedAesKey))).code).not.toBe("forbidden");
  });
});

describe("CryptoPool messages", () => {
  /** Counts the messages each worker of `target` is sent from now on. */
  function countMessages(target: CryptoPool): number[] {
    const counts = workersOf(target).map(() => 0);
    workersOf(target).forEach((worker, i) => {
      if (worker === undefined) return;
      const post = worker.postMessage.bind(worker);
      worker.postMessage = (...args: Parameters<Worker["postMessage"]>) => {
        counts[i] = (counts[i] ?? 0) + 1;
        post(...args);
      };
    });
    return counts;
  }

  it("answers a run of seals with one message, and each slower task with one of its own", async () => {
    const one = new CryptoPool({ size: 1, escrowPrivateKeys: [escrow.privateKey] });
    try {
      await openForUser(Buffer.from("warm-up"), one);
      const [worker] = workersOf(one);
      const answers: number[] = [];
      const kinds: string[] = [];
      worker?.on("message", (responses: WorkerResponse[]) => {
        answers.push(responses.length);
        for (const response of responses) kinds.push(response.ok ? typeof response.result : "error");
      });
      const seal = (plaintext: string) =>
        one.seal({ plaintext, aad: aadText, keyId: "key_user", spki: user.publicKey });
      // One turn, so one message to the worker: five seals, two decrypts, three seals.
      const first = ["a", "b", "c", "d", "e"].map(seal);
      const opens = ["f", "g"].map((p) => openForUser(Buffer.from(p), one));
      const last = ["h", "i", "j"].map(seal);
      const [sealed, opened] = await Promise.all([Promise.all([...first, ...last]), Promise.all(opens)]);
      expect(answers).toEqual([5, 1, 1, 3]);
      // Seals are answered as text (the base64 the store keeps), decrypts as bytes.
      expect(kinds).toEqual([...Array(5).fill("string"), "object", "object", ...Array(3).fill("string")]);
      const privateKey = parsePrivateKey(user.privateKey);
      expect(sealed.map((s) => openSealedReceipt(sealedFromText(s), aad, privateKey).toString())).toEqual([
        ..."abcdehij",
      ]);
      expect(opened.map((b) => b.toString())).toEqual(["f", "g"]);
    } finally {
      await one.close();
    }
  });

  it("sends the tasks of one event-loop turn as one message per worker, spread over the workers", async () => {
    const two = new CryptoPool({ size: 2, escrowPrivateKeys: [escrow.privateKey] });
    try {
      // Starts both workers, then counts what the next turn sends them.
      for (const _ of [0, 1]) await openForUser(Buffer.from("warm-up"), two);
      const counts = countMessages(two);
      const plaintexts = Array.from({ length: 8 }, (_, i) => `receipt ${i}`);
      const seals = plaintexts.map((plaintext) =>
        two.seal({ plaintext, aad: aadText, keyId: "key_user", spki: user.publicKey }),
      );
      const opens = plaintexts.map((p) => openForUser(Buffer.from(p), two));
      const [sealed, opened] = await Promise.all([Promise.all(seals), Promise.all(opens)]);
      expect(counts).toEqual([1, 1]);
      const privateKey = parsePrivateKey(user.privateKey);
      expect(sealed.map((s) => openSealedReceipt(sealedFromText(s), aad, privateKey).toString())).toEqual(
        plaintexts,
      );
      expect(opened.map((b) => b.toString())).toEqual(plaintexts);
      // A later turn is a new message.
      await openForUser(Buffer.from("later"), two);
      expect(counts.reduce((a, b) => a + b)).toBe(3);
    } finally {
      await two.close();
    }
  });
  it("fills one worker's message with a turn's tasks, up to TURN_BATCH, before waking another", async () => {
    const two = new CryptoPool({ size: 2, escrowPrivateKeys: [escrow.privateKey] });
    try {
      for (const _ of [0, 1]) await openForUser(Buffer.from("warm-up"), two);
      const counts = countMessages(two);
      expect(workersOf(two).every((worker) => worker !== undefined)).toBe(true);
      const seal = (plaintext: string) =>
        two.seal({ plaintext, aad: aadText, keyId: "key_user", spki: user.publicKey });
      const privateKey = parsePrivateKey(user.privateKey);
      const opened = (sealed: SealedReceiptText[]) =>
        sealed.map((s) => openSealedReceipt(sealedFromText(s), aad, privateKey).toString());
      // A turn of a few seals wakes one worker, not both.
      const few = Array.from({ length: TURN_BATCH }, (_, i) => `few ${i}`);
      expect(opened(await Promise.all(few.map(seal)))).toEqual(few);
      expect([...counts].sort()).toEqual([0, 1]);
      // One more than a message takes: the other worker is woken for the rest.
      const more = Array.from({ length: TURN_BATCH + 1 }, (_, i) => `more ${i}`);
      expect(opened(await Promise.all(more.map(seal)))).toEqual(more);
      expect([...counts].sort()).toEqual([1, 2]);
    } finally {
      await two.close();
    }
  });

  it("keeps no seal request, and so no plaintext, while the worker seals it", async () => {
    const one = new CryptoPool({ size: 1, escrowPrivateKeys: [escrow.privateKey] });
    try {
      await openForUser(Buffer.from("warm-up"), one);
      setFlagsFromString("--expose-gc");
      const gc = runInNewContext("gc") as () => void;
      // Made in a plain function: this test's own frame holds no reference to the request.
      const start = () => {
        const request = { plaintext: "kept?", aad: aadText, keyId: "key_user", spki: user.publicKey };
        return { held: new WeakRef(request), sealed: one.seal(request) };
      };
      const { held, sealed } = start();
      // The pool posts at the end of this turn; its answer can only be read on a later one.
      await new Promise((resolve) => setImmediate(resolve));
      gc();
      expect(held.deref()).toBeUndefined();
      const privateKey = parsePrivateKey(user.privateKey);
      expect(openSealedReceipt(sealedFromText(await sealed), aad, privateKey).toString()).toBe("kept?");
    } finally {
      await one.close();
    }
  });
});

describe("CryptoPool lifecycle", () => {
  it("refuses an escrow key that does not parse, at construction", () => {
    expect(() => new CryptoPool({ escrowPrivateKeys: ["junk"] })).toThrow(AppError);
    expect(() => new CryptoPool({ size: 0, escrowPrivateKeys: [escrow.privateKey] })).toThrow(RangeError);
  });

  it("rejects a seal, never throws, when its worker cannot start", async () => {
    const broken = new CryptoPool({ size: 1, escrowPrivateKeys: [escrow.privateKey] });
    (broken as unknown as { spawn: () => never }).spawn = () => {
      throw new Error("no thread for you");
    };
    try {
      const sealing = broken.seal({ plaintext: "x", aad: aadText, keyId: "key_user", spki: user.publicKey });
      await expect(sealing).rejects.toThrow("no thread for you");
    } finally {
      await broken.close();
    }
  });

  it("rejects pending and later calls with service_unavailable when closed", async () => {
    const closing = new CryptoPool({ size: 1, escrowPrivateKeys: [escrow.privateKey] });
    const pending = Array.from({ length: 5 }, () => rejection(openForUser(Buffer.from("late"), closing)));
    await closing.close();
    for (const error of await Promise.all(pending)) expect(error.code).toBe("service_unavailable");
    expect((await rejection(openForUser(Buffer.from("after"), closing))).code).toBe("service_unavailable");
    expect(workersOf(closing)).toEqual([undefined]);
    await closing.close();
  });

  it("rejects the task of a worker that dies and replaces the worker", async () => {
    const fragile = new CryptoPool({ size: 1, escrowPrivateKeys: [escrow.privateKey] });
    try {
      const lost = rejection(openForUser(Buffer.from("lost"), fragile));
      const [worker] = workersOf(fragile);
      await worker?.terminate();
      const error = await lost;
      expect(error.code).toBe("internal_server_error");
      expect(error.message).toBe("The crypto worker stopped unexpectedly.");
      expect((await openForUser(Buffer.from("next"), fragile)).toString()).toBe("next");
      expect(workersOf(fragile)[0]).not.toBe(worker);
    } finally {
      await fragile.close();
    }
  });
});

describe("CryptoPool.generateKeyPair", () => {
  it("generates RSA-2048 pairs in base64 DER whose halves belong together", async () => {
    const [a, b] = await Promise.all([pool.generateKeyPair(), pool.generateKeyPair()]);
    for (const pair of [a, b]) {
      const publicKey = parsePublicKey(pair.publicKey);
      expect(publicKey.key.asymmetricKeyDetails).toMatchObject({
        modulusLength: 2048,
        publicExponent: 65537n,
      });
      expect(privateKeyMatches(parsePrivateKey(pair.privateKey), publicKey.spki)).toBe(true);
    }
    expect(a.publicKey).not.toBe(b.publicKey);
  });

  it.runIf(process.platform === "linux")(
    "runs key generation on threads of lower priority than the event loop",
    async () => {
      await pool.generateKeyPair();
      const nice = (tid: string) =>
        Number(readFileSync(`/proc/self/task/${tid}/stat`, "utf8").split(") ")[1]?.split(" ")[16]);
      const niceness = readdirSync("/proc/self/task").map(nice);
      expect(nice(String(process.pid))).toBe(0);
      expect(niceness).toContain(KEYGEN_NICENESS);
    },
  );
});

describe("packSealedText / unpackSealedText", () => {
  it("carries the four parts (five with an encapsulated key) as base64 and refuses anything else", () => {
    const sealed = sealReceipt(Buffer.from("receipt"), aad, userKey);
    const text = unpackSealedText(packSealedText(sealed));
    expect(sealedFromText(text)).toEqual(sealed);
    expect(text.iv).toBe(sealed.iv.toString("base64"));
    expect(() => unpackSealedText("a.b.c")).toThrow();
    expect(() => unpackSealedText("a.b.c.d.")).toThrow();
    expect(() => unpackSealedText("a.b.c.d.e.f")).toThrow();
    expect(unpackSealedText("a.b.c.d.e")).toEqual({
      encryptedAesKey: "a",
      iv: "b",
      authTag: "c",
      ciphertext: "d",
      encapsulatedKey: "e",
    });
  });
});
