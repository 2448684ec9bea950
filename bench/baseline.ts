import {
  createPublicKey,
  generateKeyPair,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
} from "node:crypto";
import { createServer as createHttp2Server, type ServerHttp2Stream } from "node:http2";
import { promisify } from "node:util";
import { create, fromBinary, fromJson, type JsonObject, toBinary, toJson } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import Fastify from "fastify";
import {
  CreatePaymentRequestSchema,
  CreatePaymentResponseSchema,
  DecryptPaymentRequestSchema,
  DecryptPaymentResponseSchema,
} from "../gen/receipts/v1/payments_pb.js";
import { ReceiptSchema } from "../gen/receipts/v1/receipt_pb.js";
import { EncryptReceiptRequestSchema, EncryptReceiptResponseSchema } from "../gen/receipts/v1/receipts_pb.js";
import { CryptoPool } from "../src/crypto/crypto-pool.js";
import { openSealedReceipt, type SealedReceipt, sealReceipt } from "../src/crypto/envelope.js";
import {
  type CryptoKey,
  hpkeKeyPairOf,
  importHpkePublicKey,
  openSealedReceiptHpke,
  sealReceiptHpke,
} from "../src/crypto/hpke.js";
import { parsePrivateKey } from "../src/crypto/keys.js";
import { registerFloor, setUpFloor } from "./floor.js";
import { registerKtFloor, setUpKtFloor } from "./kt-floor.js";
import { registerZkFloor, serveZkGrpc, setUpZkFloor, type ZkGrpcAnswer } from "./zk-floor.js";

/**
 * The benchmark's baseline: the service's cryptography with no framework around it, so the service's
 * throughput can be read as a fraction of what the crypto allows on this machine, in the same run.
 *
 * - HTTP/1.1 (Fastify, bare routes): encrypt and create = AES-256-GCM with a fresh key and IV, the key
 *   wrapped with RSA-OAEP-256 to a public key parsed once (the service's own `sealReceipt`); decrypt =
 *   parse the PKCS#8 private key sent (with the service's own parser), RSA-OAEP-256 unwrap, AES-256-GCM
 *   open (the service's own `openSealedReceipt`), synchronously on the event loop; list = the same
 *   number of sealed receipts as the service returns; raw-keygen = `crypto.generateKeyPair` (async) in a
 *   loop.
 * - gRPC (a bare `node:http2` stream handler, framing by hand): the same encrypt and decrypt, and the
 *   zero-knowledge path's look-up and sealed receipts (bench/zk-floor.ts).
 * - P-256, once `/setup` names `HPKE-P256-SHA256-A256GCM`: `/p256/receipts/encrypt`
 *   seals with the service's own `sealReceiptHpke` (AES-256-GCM, the key wrapped with HPKE to a public
 *   key imported once), `/p256/payments/decrypt` parses the PKCS#8 key with the service's parser and
 *   opens with its `hpkeKeyPairOf` and `openSealedReceiptHpke`, `/p256/onboarding/generate-keys` makes
 *   a P-256 pair with the call the service's key-generation worker makes, on the event loop; the gRPC
 *   handler seals and opens with HPKE too until the next `/setup` of RSA keys.
 *
 * Started by `run.ts` as a child process with `BASELINE_PORT` and `BASELINE_GRPC_PORT`, on 127.0.0.1.
 */

const generateKeyPairAsync = promisify(generateKeyPair);

/**
 * What the bench sends to `/setup`: the recipients' public keys and the receipt to seal for decrypt;
 * for the floor route, the API key it accepts and the recipients' hashed PANs (same order as the keys).
 */
interface Setup {
  /** The recipients' suite; RSA when absent. */
  algorithm?: string;
  publicKeys: string[];
  receipt: Record<string, unknown>;
  listCount: number;
  floor?: { apiKey: string; hashedPans: string[]; keyIds?: string[] };
}

let recipients: { keyId: string; key: KeyObject }[] = [];
let fixtures: { sealed: SealedReceipt; aad: Buffer; keyId: string }[] = [];
let listing: unknown[] = [];
let next = 0;

const HPKE_P256 = "HPKE-P256-SHA256-A256GCM";
/** The suite of the last `/setup`: which one the gRPC handler seals and opens with. */
let suite: "rsa" | "p256" = "rsa";
let p256Recipients: { keyId: string; key: CryptoKey }[] = [];
let p256Fixtures: { sealed: SealedReceipt; aad: Buffer; keyId: string }[] = [];

function aadOf(r: { version?: unknown; receiptId?: unknown; merchantId?: unknown; transactionId?: unknown }) {
  return Buffer.from(`${r.version ?? "1.0"}\n${r.receiptId}\n${r.merchantId}\n${r.transactionId}`, "utf8");
}

/**
 * Seals with the service's own `sealReceipt` (AES-256-GCM, the AES key wrapped with RSA-OAEP-256, not
 * bound to the AAD, as the service seals by default), so both sides hand node:crypto their keys alike.
 */
function seal(plaintext: Buffer, aad: Buffer, key: KeyObject): SealedReceipt {
  return sealReceipt(plaintext, aad, key);
}

/**
 * Opens a sealed receipt with a base64 PKCS#8 key, parsed as the service parses it (`parsePrivateKey`:
 * the DER read into a JWK, which Node imports far faster than DER), and opened with the service's own
 * `openSealedReceipt`, so both sides pay the same.
 */
function open(sealed: SealedReceipt, aad: Buffer, privateKeyBase64: string): Buffer {
  return openSealedReceipt(sealed, aad, parsePrivateKey(privateKeyBase64));
}

/** Seals a receipt (REST JSON field names, `recipientHashedPan` left out) to the next recipient. */
function sealNext(body: Record<string, unknown>) {
  const { recipientHashedPan: _pan, ...fields } = body;
  const recipient = recipients[next++ % recipients.length];
  if (recipient === undefined) throw new Error("baseline not set up");
  const sealed = seal(Buffer.from(JSON.stringify(fields), "utf8"), aadOf(fields), recipient.key);
  return {
    version: String(fields.version ?? "1.0"),
    receiptId: String(fields.receiptId),
    keyId: recipient.keyId,
    merchantId: String(fields.merchantId),
    transactionId: String(fields.transactionId),
    sealed,
  };
}

/** A sealed receipt as the REST API renders it. */
function encryptJson(body: Record<string, unknown>) {
  const { sealed, ...ids } = sealNext(body);
  return {
    ...ids,
    keyBundle: {
      encryptedAesKey: sealed.encryptedAesKey.toString("base64"),
      keyId: ids.keyId,
      algorithm: "RSA-OAEP-256",
    },
    ciphertext: sealed.ciphertext.toString("base64"),
    iv: sealed.iv.toString("base64"),
    authTag: sealed.authTag.toString("base64"),
    createdAt: new Date().toISOString(),
    isEscrowed: false,
  };
}

/** Opens fixture `paymentId` ("bpay-<n>") with the private key the caller sent. */
function decryptFixture(paymentId: string, privateKey: string) {
  const fixture = fixtures[Number(paymentId.slice(5))];
  if (fixture === undefined) throw new Error(`no fixture ${paymentId}`);
  const plaintext = open(fixture.sealed, fixture.aad, privateKey);
  return { fixture, receipt: JSON.parse(plaintext.toString("utf8")) as Record<string, unknown> };
}

/** {@link sealNext} with HPKE, to the next P-256 recipient, as the service's worker seals. */
async function sealNextP256(body: Record<string, unknown>) {
  const { recipientHashedPan: _pan, ...fields } = body;
  const recipient = p256Recipients[next++ % p256Recipients.length];
  if (recipient === undefined) throw new Error("baseline not set up for P-256");
  const sealed = await sealReceiptHpke(
    Buffer.from(JSON.stringify(fields), "utf8"),
    aadOf(fields),
    recipient.key,
  );
  return {
    version: String(fields.version ?? "1.0"),
    receiptId: String(fields.receiptId),
    keyId: recipient.keyId,
    merchantId: String(fields.merchantId),
    transactionId: String(fields.transactionId),
    sealed,
  };
}

/** A receipt sealed to a P-256 key as the REST API renders it. */
async function encryptJsonP256(body: Record<string, unknown>) {
  const { sealed, ...ids } = await sealNextP256(body);
  return {
    ...ids,
    keyBundle: {
      encryptedAesKey: sealed.encryptedAesKey.toString("base64"),
      encapsulatedKey: sealed.encapsulatedKey?.toString("base64"),
      keyId: ids.keyId,
      algorithm: HPKE_P256,
    },
    ciphertext: sealed.ciphertext.toString("base64"),
    iv: sealed.iv.toString("base64"),
    authTag: sealed.authTag.toString("base64"),
    createdAt: new Date().toISOString(),
    isEscrowed: false,
  };
}

/** {@link decryptFixture} of a P-256 fixture: the key parsed and opened as the service's worker does. */
async function decryptFixtureP256(paymentId: string, privateKey: string) {
  const fixture = p256Fixtures[Number(paymentId.slice(5))];
  if (fixture === undefined) throw new Error(`no P-256 fixture ${paymentId}`);
  const pair = await hpkeKeyPairOf(parsePrivateKey(privateKey));
  const plaintext = await openSealedReceiptHpke(fixture.sealed, fixture.aad, pair);
  return { fixture, receipt: JSON.parse(plaintext.toString("utf8")) as Record<string, unknown> };
}

/** A P-256 key pair, made with the call the service's key-generation worker makes (base64 DER). */
function generateP256() {
  const pair = generateKeyPairSync("ec", {
    namedCurve: "P-256",
    publicKeyEncoding: { type: "spki", format: "der" },
    privateKeyEncoding: { type: "pkcs8", format: "der" },
  });
  return {
    keyId: `key_${randomBytes(12).toString("base64url")}`,
    publicKey: pair.publicKey.toString("base64"),
    privateKey: pair.privateKey.toString("base64"),
    algorithm: HPKE_P256,
  };
}

async function rawKeygen(seconds: number, concurrency: number) {
  const started = performance.now();
  const deadline = started + seconds * 1000;
  let count = 0;
  const loop = async () => {
    while (performance.now() < deadline) {
      const pair = await generateKeyPairAsync("rsa", {
        modulusLength: 2048,
        publicExponent: 65537,
        publicKeyEncoding: { type: "spki", format: "der" },
        privateKeyEncoding: { type: "pkcs8", format: "der" },
      });
      pair.publicKey.toString("base64");
      pair.privateKey.toString("base64");
      if (performance.now() <= deadline) count++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  return { count, seconds, rate: count / seconds };
}

const app = Fastify({ logger: false, bodyLimit: 1_048_576 });

app.post("/setup", async (request) => {
  const setup = request.body as Setup;
  if (setup.algorithm === HPKE_P256) {
    suite = "p256";
    p256Recipients = await Promise.all(
      setup.publicKeys.map(async (spki, i) => ({
        keyId: `baseline-p256-key-${i}`,
        key: await importHpkePublicKey(spki),
      })),
    );
    const { recipientHashedPan: _pan, ...fields } = setup.receipt;
    const aad = aadOf(fields);
    p256Fixtures = await Promise.all(
      p256Recipients.map(async (r) => ({
        sealed: await sealReceiptHpke(Buffer.from(JSON.stringify(fields), "utf8"), aad, r.key),
        aad,
        keyId: r.keyId,
      })),
    );
    return { success: true, data: { recipients: p256Recipients.length } };
  }
  suite = "rsa";
  recipients = setup.publicKeys.map((spki, i) => ({
    keyId: `baseline-key-${i}`,
    key: createPublicKey({ key: Buffer.from(spki, "base64"), format: "der", type: "spki" }),
  }));
  const { recipientHashedPan: _pan, ...fields } = setup.receipt;
  fixtures = recipients.map((r) => ({
    sealed: seal(Buffer.from(JSON.stringify(fields), "utf8"), aadOf(fields), r.key),
    aad: aadOf(fields),
    keyId: r.keyId,
  }));
  listing = Array.from({ length: setup.listCount }, (_, i) =>
    encryptJson({ ...setup.receipt, receiptId: `list-${i}` }),
  );
  if (setup.floor !== undefined) {
    const hashedPans = setup.floor.hashedPans;
    const cardholders = recipients.map((r, i) => ({
      hashedPan: hashedPans[i] ?? "",
      keyId: r.keyId,
      spki: setup.publicKeys[i] ?? "",
    }));
    setUpFloor(setup.floor.apiKey, cardholders);
    // The zero-knowledge routes answer the service's key ids, so one sealed body fits both sides.
    const keyIds = setup.floor.keyIds;
    setUpZkFloor(
      setup.floor.apiKey,
      cardholders.map((c, i) => ({ ...c, keyId: keyIds?.[i] ?? c.keyId })),
    );
  }
  return { success: true, data: { recipients: recipients.length } };
});

// The floor seals on the service's worker pool (started on the floor's first call); its escrow key,
// which the floor never uses, only has to be a valid RSA key.
const floorPool = new CryptoPool({
  escrowPrivateKeys: [
    generateKeyPairSync("rsa", { modulusLength: 2048 })
      .privateKey.export({ type: "pkcs8", format: "der" })
      .toString("base64"),
  ],
});
registerFloor(app, { seal: (request) => floorPool.seal(request) });
registerZkFloor(app);
registerKtFloor(app);

app.post("/kt-setup", async (request) => {
  const { note, directories } = request.body as { note: string; directories: Record<string, string> };
  setUpKtFloor(note, directories);
  return { success: true, data: {} };
});

app.post("/receipts/encrypt", async (request) => ({
  success: true,
  data: encryptJson(request.body as Record<string, unknown>),
}));

app.post("/payments/:gateway/create", async (request) => {
  const sealed = encryptJson(request.body as Record<string, unknown>);
  const paymentId = `pay_${randomBytes(12).toString("base64url")}`;
  return {
    success: true,
    data: {
      paymentId,
      gateway: (request.params as { gateway: string }).gateway,
      status: "succeeded",
      amount: (request.body as { amount?: number }).amount,
      receipt: sealed,
    },
  };
});

app.post("/payments/decrypt", async (request) => {
  const { paymentId, privateKey } = request.body as { paymentId: string; privateKey: string };
  const { fixture, receipt } = decryptFixture(paymentId, privateKey);
  return {
    success: true,
    data: { ...receipt, keyId: fixture.keyId, decryptedAt: new Date().toISOString() },
  };
});

app.post("/p256/receipts/encrypt", async (request) => ({
  success: true,
  data: await encryptJsonP256(request.body as Record<string, unknown>),
}));

app.post("/p256/payments/decrypt", async (request) => {
  const { paymentId, privateKey } = request.body as { paymentId: string; privateKey: string };
  const { fixture, receipt } = await decryptFixtureP256(paymentId, privateKey);
  return {
    success: true,
    data: { ...receipt, keyId: fixture.keyId, decryptedAt: new Date().toISOString() },
  };
});

app.post("/p256/onboarding/generate-keys", async () => ({ success: true, data: generateP256() }));

app.get("/receipts/:userId", async () => ({ success: true, data: { receipts: listing, nextPageToken: "" } }));

app.post("/raw-keygen", async (request) => {
  const { seconds, concurrency } = request.body as { seconds: number; concurrency: number };
  return { success: true, data: await rawKeygen(seconds, concurrency) };
});

/** gRPC without a framework: one length-prefixed message in, one out, `grpc-status` in the trailers. */
function serveGrpc(stream: ServerHttp2Stream, path: string, body: Buffer): void {
  const message = body.subarray(5);
  let reply: Uint8Array;
  if (path === "/receipts.v1.ReceiptsService/EncryptReceipt") {
    const req = fromBinary(EncryptReceiptRequestSchema, message);
    const json = toJson(ReceiptSchema, req.receipt ?? create(ReceiptSchema)) as Record<string, unknown>;
    const { sealed, ...ids } = sealNext(json);
    reply = toBinary(
      EncryptReceiptResponseSchema,
      create(EncryptReceiptResponseSchema, {
        receipt: {
          ...ids,
          keyBundle: { encryptedAesKey: sealed.encryptedAesKey, keyId: ids.keyId, algorithm: "RSA-OAEP-256" },
          ciphertext: sealed.ciphertext,
          iv: sealed.iv,
          authTag: sealed.authTag,
          createdAt: timestampNow(),
        },
      }),
    );
  } else if (path === "/receipts.v1.PaymentsService/CreatePayment") {
    const req = fromBinary(CreatePaymentRequestSchema, message);
    const json = toJson(ReceiptSchema, req.receipt ?? create(ReceiptSchema)) as Record<string, unknown>;
    const { sealed: _sealed, ...ids } = sealNext(json);
    const amount = req.receipt?.amount ?? 0n;
    reply = toBinary(
      CreatePaymentResponseSchema,
      create(CreatePaymentResponseSchema, {
        paymentId: `pay_${randomBytes(12).toString("base64url")}`,
        gateway: req.gateway,
        status: "succeeded",
        amount,
        currency: req.receipt?.currency ?? "",
        createdAt: timestampNow(),
        serviceMetadata: {
          receiptId: ids.receiptId,
          transactionId: ids.transactionId,
          keyId: ids.keyId,
          amount,
        },
      }),
    );
  } else if (path === "/receipts.v1.PaymentsService/DecryptPayment") {
    const req = fromBinary(DecryptPaymentRequestSchema, message);
    const { fixture, receipt } = decryptFixture(req.paymentId, req.privateKey);
    const out = fromJson(ReceiptSchema, receipt as JsonObject);
    out.keyId = fixture.keyId;
    out.decryptedAt = timestampNow();
    reply = toBinary(DecryptPaymentResponseSchema, create(DecryptPaymentResponseSchema, { receipt: out }));
  } else {
    stream.respond({ ":status": 200, "content-type": "application/grpc" }, { endStream: true });
    return;
  }
  sendGrpc(stream, reply);
}

/** {@link serveGrpc} for P-256 recipients and keys: encrypt and decrypt with HPKE. */
async function serveGrpcP256(stream: ServerHttp2Stream, path: string, body: Buffer): Promise<void> {
  const message = body.subarray(5);
  let reply: Uint8Array;
  if (path === "/receipts.v1.ReceiptsService/EncryptReceipt") {
    const req = fromBinary(EncryptReceiptRequestSchema, message);
    const json = toJson(ReceiptSchema, req.receipt ?? create(ReceiptSchema)) as Record<string, unknown>;
    const { sealed, ...ids } = await sealNextP256(json);
    reply = toBinary(
      EncryptReceiptResponseSchema,
      create(EncryptReceiptResponseSchema, {
        receipt: {
          ...ids,
          keyBundle: {
            encryptedAesKey: sealed.encryptedAesKey,
            encapsulatedKey: sealed.encapsulatedKey,
            keyId: ids.keyId,
            algorithm: HPKE_P256,
          },
          ciphertext: sealed.ciphertext,
          iv: sealed.iv,
          authTag: sealed.authTag,
          createdAt: timestampNow(),
        },
      }),
    );
  } else if (path === "/receipts.v1.PaymentsService/DecryptPayment") {
    const req = fromBinary(DecryptPaymentRequestSchema, message);
    const { fixture, receipt } = await decryptFixtureP256(req.paymentId, req.privateKey);
    const out = fromJson(ReceiptSchema, receipt as JsonObject);
    out.keyId = fixture.keyId;
    out.decryptedAt = timestampNow();
    reply = toBinary(DecryptPaymentResponseSchema, create(DecryptPaymentResponseSchema, { receipt: out }));
  } else {
    stream.respond({ ":status": 200, "content-type": "application/grpc" }, { endStream: true });
    return;
  }
  sendGrpc(stream, reply);
}

/** One length-prefixed reply and `grpc-status: 0` in the trailers, after `headers` if given. */
function sendGrpc(stream: ServerHttp2Stream, reply: Uint8Array, headers: Record<string, string> = {}): void {
  const frame = Buffer.alloc(5 + reply.length);
  frame.writeUInt32BE(reply.length, 1);
  frame.set(reply, 5);
  stream.respond(
    { ":status": 200, "content-type": "application/grpc+proto", ...headers },
    { waitForTrailers: true },
  );
  stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
  stream.end(frame);
}

const grpc = createHttp2Server();
grpc.on("stream", (stream, headers) => {
  const chunks: Buffer[] = [];
  stream.on("data", (chunk: Buffer) => chunks.push(chunk));
  stream.on("end", () => {
    const path = String(headers[":path"]);
    try {
      const zk = serveZkGrpc(
        path,
        headers["x-api-key"],
        stream.session?.socket?.remoteAddress ?? "",
        Buffer.concat(chunks).subarray(5),
      );
      if (zk !== undefined) {
        answerZk(stream, zk);
        return;
      }
    } catch (err) {
      failGrpc(stream, err);
      return;
    }
    if (suite === "p256") {
      serveGrpcP256(stream, path, Buffer.concat(chunks)).catch((err: unknown) => failGrpc(stream, err));
      return;
    }
    try {
      serveGrpc(stream, path, Buffer.concat(chunks));
    } catch (err) {
      failGrpc(stream, err);
    }
  });
});

/** A zero-knowledge floor call's answer: its reply, or its refusal in a trailers-only answer. */
function answerZk(stream: ServerHttp2Stream, zk: ZkGrpcAnswer): void {
  if (zk.reply !== undefined) {
    sendGrpc(stream, zk.reply, zk.headers);
    return;
  }
  stream.respond(
    {
      ":status": 200,
      "content-type": "application/grpc",
      ...zk.headers,
      "grpc-status": String(zk.status ?? 2),
      "grpc-message": encodeURIComponent(zk.message ?? ""),
    },
    { endStream: true },
  );
}

/** A failed call: `grpc-status: 13` with the error's message. */
function failGrpc(stream: ServerHttp2Stream, err: unknown): void {
  const message = err instanceof Error ? err.message : String(err);
  stream.respond(
    {
      ":status": 200,
      "content-type": "application/grpc",
      "grpc-status": "13",
      "grpc-message": encodeURIComponent(message),
    },
    { endStream: true },
  );
}

const port = Number(process.env.BASELINE_PORT ?? 0);
const grpcPort = Number(process.env.BASELINE_GRPC_PORT ?? 0);
await app.listen({ port, host: "127.0.0.1" });
await new Promise<void>((resolve) => grpc.listen(grpcPort, "127.0.0.1", resolve));
process.stdout.write("baseline ready\n");

const stop = () => {
  grpc.close();
  app.close().finally(() => process.exit(0));
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
