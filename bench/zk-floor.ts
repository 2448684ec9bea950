import { createPublicKey } from "node:crypto";
import type { FastifyInstance } from "fastify";
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
