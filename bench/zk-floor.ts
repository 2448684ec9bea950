import { createPublicKey } from "node:crypto";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import type { FastifyInstance } from "fastify";
import { LookupKeyRequestSchema, LookupKeyResponseSchema } from "../gen/receipts/v1/keys_pb.js";
import { EncryptedReceiptSchema } from "../gen/receipts/v1/receipt_pb.js";
import {
  type StoreSealedReceiptRequest,
  StoreSealedReceiptRequestSchema,
  type StoreSealedReceiptResponse,
  StoreSealedReceiptResponseSchema,
} from "../gen/receipts/v1/receipts_pb.js";
import { ApiKeyGate, HASHED_PAN, invalid, panHash, refuse } from "./floor-parts.js";

/**
 * The bare routes of the zero-knowledge path (merchant-side sealing: the service never sees the
 * receipt), for `npm run bench:wrk`: `POST /zk/keys/lookup` and `POST /zk/receipts/sealed`, written by hand on the
 * baseline's Fastify app with no framework layer, no protobuf and no store interface, doing the work
 * the real path must do and nothing more:
 *
 * - both: the API key looked up by its SHA-256, the call counted in a per-minute window (the
 *   rate-limit headers set), a request id, the JSON body parsed by Fastify;
 * - look-up: `recipientHashedPan` checked (64 hex, nothing else in the body), the card found by the
 *   HMAC of its hashed PAN, an audit record appended (`key.lookup`, tenant, request id, source address,
 *   key id), the answer `{keyId, algorithm, publicKey, isEscrowed, aadBound}`;
 * - sealed: every field checked (ids: present, at most 256 characters; the card reference; base64 of
 *   the four binary parts, IV 12 bytes, tag 16, the wrapped key the size of the recipient's RSA modulus,
 *   ciphertext present and at most 1 MiB; the bundle's algorithm the key's; no unknown member), the
 *   merchantId claimed for the caller's tenant on first use and refused to another, the bundle's keyId
 *   compared with the card's current key (`conflict` otherwise), `(merchantId, receiptId)` unique, the
 *   record stored in a map, the encrypted receipt answered as encrypt answers it.
 *
 * The same two calls over gRPC (`serveZkGrpc`, on the baseline's bare `node:http2` handler): the same
 * work on the decoded message, the binary answer, a refusal as a non-zero `grpc-status`.
 *
 * What it leaves out, and the service does: the key directory's members of a look-up answer (none
 * without a key log), escrow routing by card BIN (not sent here), idempotency keys (not sent).
 */

interface Recipient {
  keyId: string;
  spki: string;
  /** Bytes of the RSA modulus: the size a wrapped AES key must have. */
  wrappedBytes: number;
}

const LIMIT = 100_000_000;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const MAX_CIPHERTEXT = 1_048_576;
const ALGORITHM = "RSA-OAEP-256";
const SEALED_MEMBERS = new Set([
  "recipientHashedPan",
  "version",
  "receiptId",
  "merchantId",
  "transactionId",
  "keyBundle",
  "ciphertext",
  "iv",
  "authTag",
]);

const gate = new ApiKeyGate(LIMIT);
const recipients = new Map<string, Recipient>();
const merchantOwners = new Map<string, string>();
const stored = new Map<string, object>();
const audit: object[] = [];

/** Registers the merchant API key and the cardholders (hashed PAN -> RSA key) the routes serve. */
export function setUpZkFloor(
  apiKey: string,
  cardholders: { hashedPan: string; keyId: string; spki: string }[],
) {
  gate.add(apiKey, { id: "key_zk", tenantId: "zk" });
  for (const c of cardholders) {
    const key = createPublicKey({ key: Buffer.from(c.spki, "base64"), format: "der", type: "spki" });
    const bits = key.asymmetricKeyDetails?.modulusLength ?? 2048;
    recipients.set(panHash(c.hashedPan), { keyId: c.keyId, spki: c.spki, wrappedBytes: Math.ceil(bits / 8) });
  }
}

/** Decodes a base64 member, adding a problem when it is not base64; undefined then. */
function bytesOf(problems: string[], name: string, value: unknown): Buffer | undefined {
  if (typeof value !== "string" || !BASE64.test(value) || value.length % 4 !== 0) {
    problems.push(`${name}: must be base64`);
    return undefined;
  }
  return Buffer.from(value, "base64");
}

function identifier(problems: string[], name: string, value: unknown): string {
  if (typeof value !== "string" || value === "" || value.length > 256) problems.push(`${name}: is required`);
  return String(value);
}

/** Every problem of a sealed receipt's members that needs no recipient. */
function sealedProblems(body: Record<string, unknown>) {
  const problems: string[] = [];
  const ids = {
    version: body.version === undefined ? "1.0" : identifier(problems, "version", body.version),
    receiptId: identifier(problems, "receiptId", body.receiptId),
    merchantId: identifier(problems, "merchantId", body.merchantId),
    transactionId: identifier(problems, "transactionId", body.transactionId),
  };
  const pan = body.recipientHashedPan;
  if (typeof pan !== "string" || !HASHED_PAN.test(pan)) problems.push("recipientHashedPan: must be 64 hex");
  const iv = bytesOf(problems, "iv", body.iv);
  if (iv !== undefined && iv.length !== 12) problems.push("iv: must be 12 bytes");
  const tag = bytesOf(problems, "authTag", body.authTag);
  if (tag !== undefined && tag.length !== 16) problems.push("authTag: must be 16 bytes");
  const ciphertext = bytesOf(problems, "ciphertext", body.ciphertext);
  if (ciphertext !== undefined && (ciphertext.length === 0 || ciphertext.length > MAX_CIPHERTEXT))
    problems.push("ciphertext: must be 1 to 1048576 bytes");
  const bundle = (body.keyBundle ?? {}) as Record<string, unknown>;
  if (typeof bundle.keyId !== "string" || bundle.keyId === "") problems.push("keyBundle.keyId: is required");
  if (bundle.algorithm !== ALGORITHM) problems.push(`keyBundle.algorithm: must be ${ALGORITHM}`);
  const wrapped = bytesOf(problems, "keyBundle.encryptedAesKey", bundle.encryptedAesKey);
  for (const key of Object.keys(body)) if (!SEALED_MEMBERS.has(key)) problems.push(`${key}: unknown field`);
  return { problems, ids, wrapped, bundle };
}

/** Mounts `POST /zk/keys/lookup` and `POST /zk/receipts/sealed` on the baseline's app. */
export function registerZkFloor(app: FastifyInstance): void {
  app.post("/zk/keys/lookup", async (request, reply) => {
    const principal = gate.admit(request, reply);
    if (principal === undefined) return reply;
    const body = request.body as Record<string, unknown>;
    const pan = body.recipientHashedPan;
    const problems: string[] = [];
    if (typeof pan !== "string" || !HASHED_PAN.test(pan)) problems.push("recipientHashedPan: must be 64 hex");
    for (const key of Object.keys(body))
      if (key !== "recipientHashedPan") problems.push(`${key}: unknown field`);
    if (problems.length > 0) return invalid(reply, problems);
    const recipient = recipients.get(panHash(pan as string));
    if (recipient === undefined) return refuse(reply, 404, "not_found");
    audit.push({
      at: new Date(),
      action: "key.lookup",
      tenantId: principal.tenantId,
      requestId: reply.getHeader("x-request-id"),
      sourceIp: request.ip,
      keyId: recipient.keyId,
    });
    return {
      success: true,
      data: {
        keyId: recipient.keyId,
        algorithm: ALGORITHM,
        publicKey: recipient.spki,
        isEscrowed: false,
        aadBound: true,
      },
    };
  });

  app.post("/zk/receipts/sealed", async (request, reply) => {
    const principal = gate.admit(request, reply);
    if (principal === undefined) return reply;
    const body = request.body as Record<string, unknown>;
    const { problems, ids, wrapped, bundle } = sealedProblems(body);
    if (problems.length > 0) return invalid(reply, problems);
    const owner = merchantOwners.get(ids.merchantId);
    if (owner !== undefined && owner !== principal.tenantId) return refuse(reply, 403, "forbidden");
    const hash = panHash(body.recipientHashedPan as string);
    const recipient = recipients.get(hash);
    if (recipient === undefined) return refuse(reply, 404, "not_found");
    if (bundle.keyId !== recipient.keyId) return refuse(reply, 409, "conflict");
    if (wrapped?.length !== recipient.wrappedBytes)
      return invalid(reply, [`keyBundle.encryptedAesKey: must be ${recipient.wrappedBytes} bytes`]);
    const unique = `${ids.merchantId}\u0000${ids.receiptId}`;
    if (stored.has(unique)) return refuse(reply, 409, "conflict");
    merchantOwners.set(ids.merchantId, principal.tenantId);
    const receipt = {
      ...ids,
      keyId: recipient.keyId,
      keyBundle: { encryptedAesKey: bundle.encryptedAesKey, keyId: recipient.keyId, algorithm: ALGORITHM },
      ciphertext: body.ciphertext,
      iv: body.iv,
      authTag: body.authTag,
      createdAt: new Date().toISOString(),
      isEscrowed: false,
    };
    stored.set(unique, { ...receipt, tenantId: principal.tenantId, panHash: hash });
    return { success: true, data: receipt };
  });
}

/** What a bare gRPC call answers: the reply message's bytes, or a non-zero `grpc-status`. */
export interface ZkGrpcAnswer {
  headers: Record<string, string>;
  reply?: Uint8Array;
  status?: number;
  message?: string;
}

/** The gRPC methods {@link serveZkGrpc} answers. */
export const ZK_GRPC_PATHS = {
  lookup: "/receipts.v1.KeysService/LookupKey",
  sealed: "/receipts.v1.ReceiptsService/StoreSealedReceipt",
} as const;

const refuseCall = (headers: Record<string, string>, status: number, message: string): ZkGrpcAnswer => ({
  headers,
  status,
  message,
});

/**
 * The bare gRPC routes of the zero-knowledge path (binary protobuf in and out, on the baseline's
 * `node:http2` handler): the same work as the REST routes above, the fields checked on the decoded
 * message (sizes of the bytes instead of their base64). Undefined for another method.
 */
export function serveZkGrpc(
  path: string,
  apiKey: unknown,
  sourceIp: string,
  message: Uint8Array,
): ZkGrpcAnswer | undefined {
  if (path !== ZK_GRPC_PATHS.lookup && path !== ZK_GRPC_PATHS.sealed) return undefined;
  const { headers, principal } = gate.admitCall(apiKey);
  if (principal === undefined) return refuseCall(headers, 16, "unauthorized");
  return path === ZK_GRPC_PATHS.lookup
    ? grpcLookup(headers, principal, sourceIp, message)
    : grpcSealed(headers, principal, message);
}

function grpcLookup(
  headers: Record<string, string>,
  principal: { tenantId: string },
  sourceIp: string,
  message: Uint8Array,
): ZkGrpcAnswer {
  const req = fromBinary(LookupKeyRequestSchema, message);
  if (!HASHED_PAN.test(req.recipientHashedPan) || req.$unknown !== undefined)
    return refuseCall(headers, 3, "recipientHashedPan: must be 64 hex");
  const recipient = recipients.get(panHash(req.recipientHashedPan));
  if (recipient === undefined) return refuseCall(headers, 5, "not_found");
  audit.push({
    at: new Date(),
    action: "key.lookup",
    tenantId: principal.tenantId,
    requestId: headers["x-request-id"],
    sourceIp,
    keyId: recipient.keyId,
  });
  const answer = create(LookupKeyResponseSchema, {
    keyId: recipient.keyId,
    algorithm: ALGORITHM,
    publicKey: recipient.spki,
    isEscrowed: false,
    aadBound: true,
  });
  return { headers, reply: toBinary(LookupKeyResponseSchema, answer) };
}

/** Every problem of a sealed receipt's decoded message that needs no recipient. */
function grpcSealedProblems(req: StoreSealedReceiptRequest): string[] {
  const problems: string[] = [];
  for (const [name, value] of [
    ["receiptId", req.receiptId],
    ["merchantId", req.merchantId],
    ["transactionId", req.transactionId],
  ] as const) {
    if (value === "" || value.length > 256) problems.push(`${name}: is required`);
  }
  if (req.version.length > 256) problems.push("version: is too long");
  if (!HASHED_PAN.test(req.recipientHashedPan)) problems.push("recipientHashedPan: must be 64 hex");
  if (req.iv.length !== 12) problems.push("iv: must be 12 bytes");
  if (req.authTag.length !== 16) problems.push("authTag: must be 16 bytes");
  if (req.ciphertext.length === 0 || req.ciphertext.length > MAX_CIPHERTEXT)
    problems.push("ciphertext: must be 1 to 1048576 bytes");
  if (req.keyBundle === undefined || req.keyBundle.keyId === "")
    problems.push("keyBundle.keyId: is required");
  if (req.keyBundle?.algorithm !== ALGORITHM) problems.push(`keyBundle.algorithm: must be ${ALGORITHM}`);
  if (req.$unknown !== undefined) problems.push("unknown field");
  return problems;
}

function grpcSealed(
  headers: Record<string, string>,
  principal: { tenantId: string },
  message: Uint8Array,
): ZkGrpcAnswer {
  const answer = sealedAnswer(principal, fromBinary(StoreSealedReceiptRequestSchema, message));
  if ("status" in answer) return refuseCall(headers, answer.status, answer.message);
  return { headers, reply: toBinary(StoreSealedReceiptResponseSchema, answer) };
}

/**
 * The bare gRPC route's work on a decoded sealed receipt (everything between the decode and the
 * encode): its answer, or the refusal's `grpc-status` and message. Exported for bench/sealed-steps.ts,
 * which runs it in process beside the service's domain call.
 */
export function sealedAnswer(
  principal: { tenantId: string },
  req: StoreSealedReceiptRequest,
): StoreSealedReceiptResponse | { status: number; message: string } {
  const refuse = (status: number, message: string) => ({ status, message });
  const problems = grpcSealedProblems(req);
  if (problems.length > 0) return refuse(3, problems.join("; "));
  const owner = merchantOwners.get(req.merchantId);
  if (owner !== undefined && owner !== principal.tenantId) return refuse(7, "forbidden");
  const hash = panHash(req.recipientHashedPan);
  const recipient = recipients.get(hash);
  if (recipient === undefined) return refuse(5, "not_found");
  const bundle = req.keyBundle as NonNullable<typeof req.keyBundle>;
  if (bundle.keyId !== recipient.keyId) return refuse(6, "conflict");
  if (bundle.encryptedAesKey.length !== recipient.wrappedBytes)
    return refuse(3, `keyBundle.encryptedAesKey: must be ${recipient.wrappedBytes} bytes`);
  const unique = `${req.merchantId}\u0000${req.receiptId}`;
  if (stored.has(unique)) return refuse(6, "conflict");
  merchantOwners.set(req.merchantId, principal.tenantId);
  const receipt = create(EncryptedReceiptSchema, {
    version: req.version || "1.0",
    receiptId: req.receiptId,
    keyId: recipient.keyId,
    keyBundle: { encryptedAesKey: bundle.encryptedAesKey, keyId: recipient.keyId, algorithm: ALGORITHM },
    ciphertext: req.ciphertext,
    iv: req.iv,
    authTag: req.authTag,
    merchantId: req.merchantId,
    transactionId: req.transactionId,
    createdAt: timestampNow(),
    isEscrowed: false,
  });
  stored.set(unique, { receipt, tenantId: principal.tenantId, panHash: hash });
  return create(StoreSealedReceiptResponseSchema, { receipt });
}
