import { fromBase64 } from "../kt/base64.js";

/**
 * Verifying the service's webhooks on the receiving side, with WebCrypto only (a browser, a worker,
 * Node, Deno): Standard Webhooks' `v1a` (Ed25519, against the endpoint's published `whpk_` keys),
 * which the maintained `standardwebhooks` packages do not verify yet, and `v1` (HMAC-SHA256 with the
 * endpoint's `whsec_` secret) for receivers that have no such package. The signed content is
 * `{webhook-id}.{webhook-timestamp}.{body}`; `webhook-signature` lists every signature (two of a kind
 * during a rotation), and one that verifies is enough. Verify the raw body, as received: a body
 * parsed and serialised again no longer matches.
 */

/** A webhook that did not verify: missing headers, a timestamp out of tolerance, or no good signature. */
export class WebhookVerificationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

/** The event a verified webhook carries (the JSON of the API's `Event` message). */
export interface WebhookEvent {
  id: string;
  type: string;
  timestamp: string;
  data: Record<string, string | number>;
}

/** What a webhook is verified against: its endpoint's public keys, its secret, or both. */
export interface WebhookVerifyOptions {
  /** `whpk_...` keys of the endpoint (`publicKeys` of the endpoint): a `v1a` signature by one of them. */
  publicKeys?: readonly string[];
  /** The endpoint's `whsec_...` secret: a `v1` signature with it. */
  secret?: string;
  /** Largest difference between `webhook-timestamp` and now, in seconds (default 300), against replays. */
  toleranceSeconds?: number;
  /** Now; the system clock by default. */
  now?: Date;
}

/** Request headers as a `Headers` object or a plain record (any case, Node's arrays allowed). */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

const encoder = new TextEncoder();

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof (headers as Headers).get === "function") return (headers as Headers).get(name) ?? undefined;
  for (const [key, value] of Object.entries(headers as Record<string, string | string[] | undefined>)) {
    if (key.toLowerCase() === name) return Array.isArray(value) ? value[0] : value;
  }
  return undefined;
}

/**
 * Verifies a webhook and returns its event: a `v1a` signature by one of `publicKeys`, or a `v1`
 * signature with `secret`; the timestamp within tolerance; the body's `id` equal to `webhook-id`.
 * Throws {@link WebhookVerificationError} otherwise.
 */
export async function verifyWebhook(
  body: string | Uint8Array,
  headers: WebhookHeaders,
  options: WebhookVerifyOptions,
): Promise<WebhookEvent> {
  const id = header(headers, "webhook-id");
  const timestamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !timestamp || !signatures) throw new WebhookVerificationError("Missing webhook headers.");
  if (!/^\d{1,12}$/.test(timestamp)) throw new WebhookVerificationError("Invalid webhook-timestamp.");
  const nowSeconds = Math.floor((options.now ?? new Date()).getTime() / 1000);
  if (Math.abs(nowSeconds - Number(timestamp)) > (options.toleranceSeconds ?? 300)) {
    throw new WebhookVerificationError("The webhook-timestamp is too old or too new.");
  }
  const payload = typeof body === "string" ? encoder.encode(body) : body;
  const prefix = encoder.encode(`${id}.${timestamp}.`);
  const content = new Uint8Array(prefix.length + payload.length);
  content.set(prefix);
  content.set(payload, prefix.length);
  if (!(await anySignatureVerifies(content, signatures, options))) {
    throw new WebhookVerificationError("No signature verifies.");
  }
  const event = JSON.parse(new TextDecoder().decode(payload)) as WebhookEvent;
  if (event.id !== id) throw new WebhookVerificationError("The body's id is not the webhook-id.");
  return event;
}

/** Whether one of the space-separated `version,base64` signatures verifies `content`. */
async function anySignatureVerifies(
  content: Uint8Array<ArrayBuffer>,
  signatures: string,
  options: WebhookVerifyOptions,
): Promise<boolean> {
  const subtle = globalThis.crypto.subtle;
  const ed25519 = await Promise.all(
    (options.publicKeys ?? []).map((key) => {
      const raw = key.startsWith("whpk_") ? fromBase64(key.slice(5)) : undefined;
      if (raw?.length !== 32) throw new WebhookVerificationError("A public key is not a whpk_ Ed25519 key.");
      return subtle.importKey("raw", raw, { name: "Ed25519" }, false, ["verify"]);
    }),
  );
  const secret = options.secret?.startsWith("whsec_") ? fromBase64(options.secret.slice(6)) : undefined;
  if (options.secret !== undefined && (secret === undefined || secret.length === 0)) {
    throw new WebhookVerificationError("The secret is not a whsec_ secret.");
  }
  const hmac =
    secret === undefined
      ? undefined
      : await subtle.importKey("raw", secret, { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
  for (const entry of signatures.split(" ")) {
    const [version, encoded] = entry.split(",");
    const signature = encoded === undefined ? undefined : fromBase64(encoded);
    if (signature === undefined) continue;
    if (version === "v1a" && signature.length === 64) {
      for (const key of ed25519) if (await subtle.verify("Ed25519", key, signature, content)) return true;
    } else if (version === "v1" && hmac !== undefined) {
      // WebCrypto's HMAC verify compares in constant time.
      if (await subtle.verify("HMAC", hmac, signature, content)) return true;
    }
  }
  return false;
}
