import { expect } from "vitest";
import { verifyWebhook } from "../../src/client/webhooks.js";
import { hashPan, post, receiptBody, type TestService } from "../support/harness.js";
import type { Received } from "./support.js";

/** An endpoint as created: its id, the secret (shown once) and its public keys. */
export interface CreatedEndpoint {
  endpointId: string;
  secret: string;
  publicKeys: string[];
}

/** Creates a webhook endpoint over REST with `apiKey`. */
export async function createEndpoint(
  svc: TestService,
  apiKey: string,
  url: string,
  events: string[] = ["*"],
): Promise<CreatedEndpoint> {
  const res = await post(svc, "/api/v1/webhooks/endpoints", apiKey, { url, events });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.data as CreatedEndpoint;
}

/** Generates a key pair and registers card `pan` with `issuerKey`; returns the user and key ids. */
export async function registerCard(
  svc: TestService,
  issuerKey: string,
  pan: string,
  extra: Record<string, unknown> = {},
): Promise<{ userId: string; keyId: string }> {
  const keys = (await post(svc, "/api/v1/onboarding/generate-keys", issuerKey, {})).body.data;
  const reg = await post(svc, "/api/v1/onboarding/register", issuerKey, {
    hashedPan: hashPan(pan),
    publicKey: keys.publicKey,
    keyId: keys.keyId,
    ...extra,
  });
  expect(reg.status, JSON.stringify(reg.body)).toBe(200);
  return { userId: reg.body.data.userId, keyId: reg.body.data.keyId };
}

/** Encrypts a receipt for card `pan` with `merchantKey`; returns the receiptId. */
export async function encryptFor(
  svc: TestService,
  merchantKey: string,
  pan: string,
  extra: Record<string, unknown> = {},
): Promise<string> {
  const body = receiptBody({ recipientHashedPan: hashPan(pan), ...extra });
  const res = await post(svc, "/api/v1/receipts/encrypt", merchantKey, body);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return body.receiptId as string;
}

/**
 * Checks every webhook a receiver got for `endpoint`: a `v1` signature that `standardwebhooks`
 * verifies with its secret (done by the caller, which imports the package), a `v1a` one the client
 * library verifies with its public keys, and nothing of a card in the body.
 */
export async function expectSignedByEndpoint(
  received: readonly Received[],
  endpoint: CreatedEndpoint,
  verifyV1: (body: string, headers: Record<string, string>, secret: string) => unknown,
): Promise<void> {
  for (const got of received) {
    const headers = got.headers as Record<string, string>;
    expect(verifyV1(got.body, headers, endpoint.secret)).toMatchObject({ id: headers["webhook-id"] });
    const event = await verifyWebhook(got.body, headers, { publicKeys: endpoint.publicKeys });
    expect(event.id).toBe(headers["webhook-id"]);
  }
}

/** The event types a receiver got, sorted. */
export function typesOf(received: readonly Received[]): string[] {
  return received.map((r) => JSON.parse(r.body).type as string).sort();
}

/** The webhook ids a receiver got. */
export function idsOf(received: readonly Received[]): string[] {
  return received.map((r) => String(r.headers["webhook-id"]));
}
