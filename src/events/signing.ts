import {
  createHmac,
  createPrivateKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  sign,
} from "node:crypto";

/**
 * Standard Webhooks signatures (spec/standard-webhooks.md of standard-webhooks/standard-webhooks): the
 * signed content is `{webhook-id}.{webhook-timestamp}.{body}`; `v1` is base64 HMAC-SHA256 under the
 * endpoint's secret, `v1a` base64 Ed25519 under its signing key. `webhook-signature` lists every
 * signature, space-separated, so that during a rotation the old and the new secret (or key) both sign
 * and a receiver holding either verifies.
 *
 * Key formats, as the specification names them: a secret is `whsec_` + base64 of 32 random bytes (the
 * HMAC key is the decoded bytes, as the `standardwebhooks` libraries take it); a public key is `whpk_` +
 * base64 of the 32 raw Ed25519 bytes (what WebCrypto imports as "raw"); a private key is `whsk_` +
 * base64 of the 32-byte seed (RFC 8032), which never leaves the service.
 */

const SECRET_PREFIX = "whsec_";
const PUBLIC_PREFIX = "whpk_";
const PRIVATE_PREFIX = "whsk_";

/** A new endpoint secret: `whsec_` + base64 of 32 random bytes (the specification asks 24 to 64). */
export function newSecret(): string {
  return `${SECRET_PREFIX}${randomBytes(32).toString("base64")}`;
}

/** A new Ed25519 signing key pair: `whpk_...` to publish, `whsk_...` to seal and keep. */
export function newSigningKey(): { publicKey: string; privateKey: string } {
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  const x = publicKey.export({ format: "jwk" }).x ?? "";
  const d = privateKey.export({ format: "jwk" }).d ?? "";
  return {
    publicKey: `${PUBLIC_PREFIX}${Buffer.from(x, "base64url").toString("base64")}`,
    privateKey: `${PRIVATE_PREFIX}${Buffer.from(d, "base64url").toString("base64")}`,
  };
}

/**
 * The keys that sign one delivery: open HMAC secrets and Ed25519 key objects, current first. An HMAC
 * key may be a secret `KeyObject`: on Node 24 `createHmac` with raw bytes costs about 14 us (it builds a
 * key object each time), with a kept key object about 2 us.
 */
export interface SigningKeys {
  hmacKeys: (Buffer | KeyObject)[];
  ed25519Keys: KeyObject[];
}

/** The HMAC key of a `whsec_` secret. */
export function hmacKeyOf(secret: string): Buffer {
  if (!secret.startsWith(SECRET_PREFIX)) throw new Error("Not a whsec_ secret.");
  return Buffer.from(secret.slice(SECRET_PREFIX.length), "base64");
}

/** The Ed25519 private key object of a `whsk_` seed and its `whpk_` public key. */
export function ed25519KeyOf(privateKey: string, publicKey: string): KeyObject {
  if (!privateKey.startsWith(PRIVATE_PREFIX) || !publicKey.startsWith(PUBLIC_PREFIX)) {
    throw new Error("Not a whsk_/whpk_ key pair.");
  }
  const b64url = (text: string) => Buffer.from(text, "base64").toString("base64url");
  return createPrivateKey({
    key: {
      kty: "OKP",
      crv: "Ed25519",
      d: b64url(privateKey.slice(PRIVATE_PREFIX.length)),
      x: b64url(publicKey.slice(PUBLIC_PREFIX.length)),
    },
    format: "jwk",
  });
}

/** The headers of one delivery attempt: id, timestamp (Unix seconds) and every signature. */
export interface WebhookHeaders {
  "webhook-id": string;
  "webhook-timestamp": string;
  "webhook-signature": string;
}

/**
 * Signs `body` for event `id` at `timestampSeconds` with every key given: `v1,<base64>` per HMAC key,
 * then `v1a,<base64>` per Ed25519 key.
 */
export function signWebhook(
  id: string,
  timestampSeconds: number,
  body: string,
  keys: SigningKeys,
): WebhookHeaders {
  const content = Buffer.from(`${id}.${timestampSeconds}.${body}`, "utf8");
  const signatures = [
    ...keys.hmacKeys.map((key) => `v1,${createHmac("sha256", key).update(content).digest("base64")}`),
    ...keys.ed25519Keys.map((key) => `v1a,${sign(null, content, key).toString("base64")}`),
  ];
  return {
    "webhook-id": id,
    "webhook-timestamp": String(timestampSeconds),
    "webhook-signature": signatures.join(" "),
  };
}
