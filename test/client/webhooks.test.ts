import { createHmac, createSecretKey } from "node:crypto";
import { ed25519 } from "@noble/curves/ed25519.js";
import { Webhook } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import { verifyWebhook, WebhookVerificationError } from "../../src/client/webhooks.js";
import { ed25519KeyOf, hmacKeyOf, newSecret, newSigningKey, signWebhook } from "../../src/events/signing.js";

/**
 * Standard Webhooks signatures: the service signs with node:crypto; receivers verify `v1` with the
 * maintained `standardwebhooks` package and `v1a` with the client library's WebCrypto verifier, and
 * both are checked against a second Ed25519 implementation (@noble/curves, pure JavaScript).
 */

const body = JSON.stringify({
  id: "evt_1",
  type: "user.erased",
  timestamp: "2026-01-01T00:00:00Z",
  data: {},
});
const now = () => Math.floor(Date.now() / 1000);

function signed(options: { secrets?: string[]; keys?: { publicKey: string; privateKey: string }[] } = {}) {
  const secrets = options.secrets ?? [newSecret()];
  const keys = options.keys ?? [newSigningKey()];
  const headers = signWebhook("evt_1", now(), body, {
    hmacKeys: secrets.map(hmacKeyOf),
    ed25519Keys: keys.map((k) => ed25519KeyOf(k.privateKey, k.publicKey)),
  });
  return { secrets, keys, headers: { ...headers } as Record<string, string> };
}

/** The raw bytes of a `whpk_`/`whsk_` key. */
const raw = (key: string) => new Uint8Array(Buffer.from(key.slice(5), "base64"));

describe("webhook signatures (Standard Webhooks v1 and v1a)", () => {
  it("formats keys as the specification names them: whsec_ (32 bytes), whpk_ and whsk_ (32 raw bytes each)", () => {
    expect(newSecret()).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    const key = newSigningKey();
    expect(key.publicKey).toMatch(/^whpk_/);
    expect(key.privateKey).toMatch(/^whsk_/);
    expect(raw(key.publicKey)).toHaveLength(32);
    expect(raw(key.privateKey)).toHaveLength(32);
    // The public key is the one the seed makes (RFC 8032), by the second implementation.
    expect(ed25519.getPublicKey(raw(key.privateKey))).toEqual(raw(key.publicKey));
  });

  it("signs v1 so that the standardwebhooks package verifies it", () => {
    const { secrets, headers } = signed();
    expect(new Webhook(secrets[0] ?? "").verify(body, headers)).toMatchObject({ id: "evt_1" });
    expect(() => new Webhook(newSecret()).verify(body, headers)).toThrow(/No matching signature/);
    expect(() => new Webhook(secrets[0] ?? "").verify(`${body} `, headers)).toThrow();
  });

  it("signs v1 with a kept secret key object exactly as with the secret's bytes", () => {
    const secret = newSecret();
    const withBytes = signWebhook("evt_1", 1_700_000_000, body, {
      hmacKeys: [hmacKeyOf(secret)],
      ed25519Keys: [],
    });
    const withObject = signWebhook("evt_1", 1_700_000_000, body, {
      hmacKeys: [createSecretKey(hmacKeyOf(secret))],
      ed25519Keys: [],
    });
    expect(withObject).toEqual(withBytes);
    const fresh = signWebhook("evt_1", now(), body, {
      hmacKeys: [createSecretKey(hmacKeyOf(secret))],
      ed25519Keys: [],
    });
    expect(new Webhook(secret).verify(body, { ...fresh })).toMatchObject({ id: "evt_1" });
  });

  it("signs v1a so that the client library and @noble/curves both verify it", async () => {
    const { keys, headers } = signed();
    const key = keys[0];
    if (key === undefined) throw new Error("no key");
    expect(await verifyWebhook(body, headers, { publicKeys: [key.publicKey] })).toMatchObject({
      id: "evt_1",
      type: "user.erased",
    });
    const v1a = headers["webhook-signature"]?.split(" ").find((s) => s.startsWith("v1a,"));
    const signature = Buffer.from(v1a?.slice(4) ?? "", "base64");
    const content = new TextEncoder().encode(`evt_1.${headers["webhook-timestamp"]}.${body}`);
    expect(ed25519.verify(signature, content, raw(key.publicKey))).toBe(true);
    expect(ed25519.verify(signature, content.slice(1), raw(key.publicKey))).toBe(false);
  });

  it("verifies in the client a v1a signature made by @noble/curves", async () => {
    const seed = ed25519.utils.randomSecretKey();
    const publicKey = `whpk_${Buffer.from(ed25519.getPublicKey(seed)).toString("base64")}`;
    const ts = String(now());
    const sig = ed25519.sign(new TextEncoder().encode(`evt_1.${ts}.${body}`), seed);
    const headers = {
      "webhook-id": "evt_1",
      "webhook-timestamp": ts,
      "webhook-signature": `v1a,${Buffer.from(sig).toString("base64")}`,
    };
    await expect(verifyWebhook(body, headers, { publicKeys: [publicKey] })).resolves.toMatchObject({
      id: "evt_1",
    });
    const flipped = new Uint8Array(sig);
    flipped[10] = (flipped[10] ?? 0) ^ 1;
    headers["webhook-signature"] = `v1a,${Buffer.from(flipped).toString("base64")}`;
    await expect(verifyWebhook(body, headers, { publicKeys: [publicKey] })).rejects.toThrow(
      WebhookVerificationError,
    );
  });

  it("verifies v1 in the client too, and refuses a wrong secret, key, body or timestamp", async () => {
    const { secrets, keys, headers } = signed();
    const secret = secrets[0] ?? "";
    const publicKey = keys[0]?.publicKey ?? "";
    await expect(verifyWebhook(body, headers, { secret })).resolves.toMatchObject({ id: "evt_1" });
    await expect(verifyWebhook(body, headers, { secret: newSecret() })).rejects.toThrow(/No signature/);
    await expect(verifyWebhook(body, headers, { publicKeys: [newSigningKey().publicKey] })).rejects.toThrow(
      /No signature/,
    );
    await expect(
      verifyWebhook(body.replace("user", "usr"), headers, { publicKeys: [publicKey] }),
    ).rejects.toThrow(/No signature/);
    const later = new Date(Date.now() + 301_000);
    await expect(verifyWebhook(body, headers, { publicKeys: [publicKey], now: later })).rejects.toThrow(
      /too old/,
    );
    const { "webhook-id": _id, ...noId } = headers;
    await expect(verifyWebhook(body, noId, { publicKeys: [publicKey] })).rejects.toThrow(/Missing/);
    // A signature moved to another webhook id does not verify.
    await expect(
      verifyWebhook(body, { ...headers, "webhook-id": "evt_2" }, { publicKeys: [publicKey] }),
    ).rejects.toThrow(/No signature/);
  });

  it("signs with every live secret and key during a rotation: either one verifies", async () => {
    const [older, newer] = [newSecret(), newSecret()];
    const [oldKey, newKey] = [newSigningKey(), newSigningKey()];
    const { headers } = signed({ secrets: [newer, older], keys: [newKey, oldKey] });
    const versions = headers["webhook-signature"]?.split(" ").map((s) => s.split(",")[0]);
    expect(versions).toEqual(["v1", "v1", "v1a", "v1a"]);
    for (const secret of [older, newer]) expect(new Webhook(secret).verify(body, headers)).toBeTruthy();
    for (const key of [oldKey, newKey]) {
      await expect(verifyWebhook(body, headers, { publicKeys: [key.publicKey] })).resolves.toBeTruthy();
    }
  });
});

describe("webhook signing keys: what the service refuses to sign with", () => {
  it("refuses a secret or key pair without its prefix, whichever half lacks it", () => {
    const key = newSigningKey();
    const secret = newSecret();
    expect(() => hmacKeyOf(secret.slice("whsec_".length))).toThrow("Not a whsec_ secret.");
    expect(() => hmacKeyOf(key.publicKey)).toThrow("Not a whsec_ secret.");
    expect(hmacKeyOf(secret)).toEqual(Buffer.from(secret.slice(6), "base64"));
    for (const [privateKey, publicKey] of [
      [key.privateKey.replace("whsk_", "whpk_"), key.publicKey],
      [key.privateKey, key.publicKey.replace("whpk_", "whsk_")],
      [key.publicKey, key.privateKey],
    ] as const) {
      expect(() => ed25519KeyOf(privateKey, publicKey)).toThrow("Not a whsk_/whpk_ key pair.");
    }
  });

  it("signs the id, the timestamp and the body, each in its place", () => {
    const secret = newSecret();
    const headers = signWebhook("evt_9", 1_700_000_000, "{}", {
      hmacKeys: [hmacKeyOf(secret)],
      ed25519Keys: [],
    });
    expect(headers["webhook-id"]).toBe("evt_9");
    expect(headers["webhook-timestamp"]).toBe("1700000000");
    const mac = createHmac("sha256", hmacKeyOf(secret)).update("evt_9.1700000000.{}").digest("base64");
    expect(headers["webhook-signature"]).toBe(`v1,${mac}`);
    expect(signWebhook("evt_9", 1, "{}", { hmacKeys: [], ed25519Keys: [] })["webhook-signature"]).toBe("");
  });
});
