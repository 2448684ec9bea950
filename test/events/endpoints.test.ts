import { createHmac, randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Metadata } from "@grpc/grpc-js";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CreateWebhookEndpointRequestSchema, WebhooksService } from "../../gen/receipts/v1/webhooks_pb.js";
import { verifyWebhook } from "../../src/client/webhooks.js";
import { newEvent } from "../../src/domain/event-types.js";
import { createMongoStore } from "../../src/store/mongo/index.js";
import { FakeMongo } from "../store/fake-mongo/index.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import { get, post, startService, type TestService } from "../support/harness.js";
import { FAST_EVENTS, type Receiver, startReceiver, until } from "./support.js";
import { type CreatedEndpoint, createEndpoint } from "./support-flow.js";

/**
 * Webhook endpoints (docs/events.md): what create accepts and refuses, the secret shown once and never
 * kept or logged in the clear, rotation (old and new both sign for 24 hours), deletion, and the same
 * API over gRPC and Connect.
 */

/** The service's clock, shifted by `offset` ms: rotation's 24 hours pass without waiting. */
const shifted = { offset: 0 };
const clock = { now: () => new Date(Date.now() + shifted.offset) };

let svc: TestService;
let receiver: Receiver;
const logLines: string[] = [];
const fake = new FakeMongo({ seed: 7 });

beforeAll(async () => {
  // The MongoDB adapter on the driver fake: what is stored is read back from the documents themselves.
  const store = await createMongoStore({
    uri: "mongodb://fake.invalid/",
    dbName: "receipts",
    createClient: fake.createClient,
  });
  svc = await startService({
    store,
    clock,
    logLines,
    env: {
      ...FAST_EVENTS,
      WEBHOOK_MAX_ENDPOINTS: "4",
      WEBHOOK_SECRET_KEY: randomBytes(32).toString("base64"),
    },
  });
  receiver = await startReceiver();
});
afterAll(async () => {
  await svc?.close();
  await receiver?.close();
});

/** Writes one event for issuer-1 and waits until the receiver has one more webhook. */
async function deliverOne(): Promise<{ headers: Record<string, string>; body: string }> {
  const before = receiver.received.length;
  await svc.store.events.append([newEvent("user.erased", "issuer-1", clock.now(), { userId: "usr_r" })]);
  await until(() => receiver.received.length > before);
  const got = receiver.received.at(-1);
  return { headers: got?.headers as Record<string, string>, body: got?.body ?? "" };
}

describe("creating an endpoint", () => {
  it("refuses what it cannot use, naming every field", async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ events: ["*"] }, /url: is required/],
      [{ url: "ftp://x.example/", events: ["*"] }, /url: must be an http or https URL/],
      [{ url: "https://user:pw@x.example/", events: ["*"] }, /url: must not carry credentials/],
      [{ url: "https://x.example/ a", events: ["*"] }, /url: must not contain spaces or control characters/],
      [{ url: receiver.url, events: [] }, /events: must name at least one event type/],
      [{ url: receiver.url, events: ["*", "user.erased"] }, /events: \* stands alone/],
      [{ url: receiver.url, events: ["payment.created"] }, /events\[0\]: is not sent to issuer tenants/],
      [{ url: receiver.url, events: ["receipt.deleted"] }, /events\[0\]: is not an event type/],
      [{ url: receiver.url, events: ["key.changed", "key.changed"] }, /events: must not repeat a type/],
      [{ url: receiver.url, events: ["*"], description: "x\u0007" }, /description: must not contain control/],
      [
        { url: receiver.url, events: ["*"], description: "d".repeat(257) },
        /description: must be at most 256/,
      ],
    ];
    for (const [body, details] of cases) {
      const res = await post(svc, "/api/v1/webhooks/endpoints", svc.issuerKey, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error?.details, JSON.stringify(body)).toMatch(details);
    }
  });

  it("shows the secret once: in the creation's answer, never in a listing", async () => {
    const created = await createEndpoint(svc, svc.issuerKey, receiver.url);
    expect(created.secret).toMatch(/^whsec_/);
    expect(created.publicKeys).toHaveLength(1);
    const listed = await get(svc, "/api/v1/webhooks/endpoints", svc.issuerKey);
    const text = JSON.stringify(listed.body);
    expect(text).toContain(created.endpointId);
    expect(text).not.toContain("whsec_");
    expect(
      listed.body.data.endpoints.find((e: CreatedEndpoint) => e.endpointId === created.endpointId),
    ).toEqual(expect.objectContaining({ publicKeys: created.publicKeys, status: "active", events: ["*"] }));
  });

  it("never stores or logs a secret or a signing key in the clear", async () => {
    const created = await createEndpoint(svc, svc.issuerKey, receiver.url);
    const rotated = await post(
      svc,
      `/api/v1/webhooks/endpoints/${created.endpointId}/rotate-secret`,
      svc.issuerKey,
      {
        rotateSigningKey: true,
      },
    );
    const secrets = [created.secret, rotated.body.data.secret as string];
    // The HMAC key bytes, in every encoding a careless write might use.
    const material = secrets.flatMap((s) => {
      const raw = Buffer.from(s.slice(6), "base64");
      return [s, s.slice(6), raw.toString("hex"), raw.toString("base64url")];
    });
    await deliverOne();
    const stored = JSON.stringify([
      ...fake.database("receipts").collection("webhookEndpoints").docs.values(),
    ]);
    expect(stored).toContain(created.endpointId);
    for (const piece of material) expect(stored).not.toContain(piece);
    // The private keys are never shown, so look for their form: nothing stored or logged is a whsk_ key.
    expect(stored).not.toContain("whsk_");
    const logs = logLines.join("\n");
    expect(logs.length).toBeGreaterThan(0);
    for (const piece of material) expect(logs).not.toContain(piece);
    expect(logs).not.toContain("whsk_");
  });

  it("keeps at most WEBHOOK_MAX_ENDPOINTS per tenant, and another tenant's count is its own", async () => {
    const other = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "issuer-cap" });
    for (let i = 0; i < 4; i++) await createEndpoint(svc, other, receiver.url);
    const fifth = await post(svc, "/api/v1/webhooks/endpoints", other, { url: receiver.url, events: ["*"] });
    expect(fifth.status).toBe(400);
    expect(fifth.body.error?.message).toMatch(/at most 4 webhook endpoints/);
    const merchant = await post(svc, "/api/v1/webhooks/endpoints", svc.merchantKey, {
      url: receiver.url,
      events: ["payment.created"],
    });
    expect(merchant.status).toBe(200);
  });
});

describe("rotating the secret", () => {
  it("never answers a rotated secret that does not sign: of rotations at once, the late ones are conflict", async () => {
    for (const e of (await get(svc, "/api/v1/webhooks/endpoints", svc.issuerKey)).body.data.endpoints) {
      await fetch(`${svc.baseUrl}/api/v1/webhooks/endpoints/${e.endpointId}`, {
        method: "DELETE",
        headers: { "x-api-key": svc.issuerKey },
      });
    }
    const endpoint = await createEndpoint(svc, svc.issuerKey, receiver.url);
    const path = `/api/v1/webhooks/endpoints/${endpoint.endpointId}/rotate-secret`;
    const answers = await Promise.all([1, 2].map(() => post(svc, path, svc.issuerKey, {})));
    const rotated = answers.filter((a) => a.status === 200).map((a) => a.body.data.secret as string);
    expect(rotated.length).toBeGreaterThan(0);
    for (const a of answers.filter((a) => a.status !== 200)) expect(a.body.error?.code).toBe("conflict");
    // Each secret answered signs the next delivery (two that both landed are the new and the previous).
    const next = await deliverOne();
    for (const secret of rotated) {
      expect(() => new Webhook(secret).verify(next.body, next.headers), "an answered secret").not.toThrow();
    }
  });

  it("signs with the old and the new secret (and key) for 24 hours, then with the new ones only", async () => {
    for (const e of (await get(svc, "/api/v1/webhooks/endpoints", svc.issuerKey)).body.data.endpoints) {
      await fetch(`${svc.baseUrl}/api/v1/webhooks/endpoints/${e.endpointId}`, {
        method: "DELETE",
        headers: { "x-api-key": svc.issuerKey },
      });
    }
    const first = await createEndpoint(svc, svc.issuerKey, receiver.url);
    const res = await post(
      svc,
      `/api/v1/webhooks/endpoints/${first.endpointId}/rotate-secret`,
      svc.issuerKey,
      {
        rotateSigningKey: true,
      },
    );
    expect(res.status).toBe(200);
    const second = res.body.data as CreatedEndpoint & { previousSecretExpiresAt: string };
    expect(second.secret).not.toBe(first.secret);
    expect(second.publicKeys).toEqual([expect.any(String), first.publicKeys[0]]);
    const expiry = Date.parse(second.previousSecretExpiresAt) - clock.now().getTime();
    expect(expiry).toBeGreaterThan(86_399_000);
    expect(expiry).toBeLessThanOrEqual(86_400_000);

    const during = await deliverOne();
    expect(during.headers["webhook-signature"]?.split(" ").map((s) => s.split(",")[0])).toEqual([
      "v1",
      "v1",
      "v1a",
      "v1a",
    ]);
    for (const secret of [first.secret, second.secret])
      expect(new Webhook(secret).verify(during.body, during.headers)).toBeTruthy();
    for (const key of [...first.publicKeys, ...second.publicKeys]) {
      await expect(verifyWebhook(during.body, during.headers, { publicKeys: [key] })).resolves.toBeTruthy();
    }

    shifted.offset = 86_400_000 + 1_000;
    try {
      const after = await deliverOne();
      const signatures = after.headers["webhook-signature"]?.split(" ") ?? [];
      expect(signatures.map((s) => s.split(",")[0])).toEqual(["v1", "v1a"]);
      const content = `${after.headers["webhook-id"]}.${after.headers["webhook-timestamp"]}.${after.body}`;
      const hmac = (secret: string) =>
        createHmac("sha256", Buffer.from(secret.slice(6), "base64"))
          .update(content)
          .digest("base64");
      expect(signatures[0]).toBe(`v1,${hmac(second.secret)}`);
      expect(signatures[0]).not.toBe(`v1,${hmac(first.secret)}`);
      const now = clock.now();
      await expect(
        verifyWebhook(after.body, after.headers, { publicKeys: [first.publicKeys[0] ?? ""], now }),
      ).rejects.toThrow(/No signature/);
      await expect(
        verifyWebhook(after.body, after.headers, { publicKeys: [second.publicKeys[0] ?? ""], now }),
      ).resolves.toBeTruthy();
      const listed = (await get(svc, "/api/v1/webhooks/endpoints", svc.issuerKey)).body.data.endpoints[0];
      expect(listed.publicKeys).toEqual([second.publicKeys[0]]);
      expect(listed.previousSecretExpiresAt).toBeUndefined();
    } finally {
      shifted.offset = 0;
    }
  });
});

describe("deleting an endpoint", () => {
  it("stops every delivery to it; a second delete, or another tenant's, is not_found", async () => {
    // Its own receiver, so what it gets is told apart from the live endpoint's on the shared one.
    const own = await startReceiver("/deleted");
    const endpoint = await createEndpoint(svc, svc.issuerKey, own.url);
    await createEndpoint(svc, svc.issuerKey, receiver.url);
    await deliverOne();
    await until(() => own.received.length === 1, 10_000, "the endpoint's first delivery");
    const stranger = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "issuer-x" });
    const del = (key: string) =>
      fetch(`${svc.baseUrl}/api/v1/webhooks/endpoints/${endpoint.endpointId}`, {
        method: "DELETE",
        headers: { "x-api-key": key },
      });
    expect((await del(stranger)).status).toBe(404);
    expect((await del(svc.issuerKey)).status).toBe(200);
    expect((await del(svc.issuerKey)).status).toBe(404);
    const rotate = await post(
      svc,
      `/api/v1/webhooks/endpoints/${endpoint.endpointId}/rotate-secret`,
      svc.issuerKey,
      {},
    );
    expect(rotate.status).toBe(404);
    // The next event reaches the live endpoint and nothing more reaches the deleted one.
    const sent = await deliverOne();
    expect(JSON.parse(sent.body).type).toBe("user.erased");
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(own.received).toHaveLength(1);
    await own.close();
  });
});

describe("the same API over gRPC and Connect", () => {
  it("creates over gRPC and lists over Connect, with the same answers and the tenant's view", async () => {
    const grpc = grpcClient(WebhooksService, svc.port);
    const metadata = new Metadata();
    metadata.set("x-api-key", svc.merchantKey);
    const made = await grpcUnary<{ endpoint?: { endpointId: string; secret?: string } }>(
      grpc,
      "createWebhookEndpoint",
      create(CreateWebhookEndpointRequestSchema, { url: receiver.url, events: ["payment.created"] }),
      metadata,
    );
    expect(made.error).toBeUndefined();
    expect(made.response?.endpoint?.secret).toMatch(/^whsec_/);
    const connect = createClient(
      WebhooksService,
      createConnectTransport({ baseUrl: svc.baseUrl, httpVersion: "2" }),
    );
    const listed = await connect.listWebhookEndpoints({}, { headers: { "x-api-key": svc.merchantKey } });
    expect(listed.endpoints.map((e) => e.endpointId)).toContain(made.response?.endpoint?.endpointId);
    expect(listed.endpoints.every((e) => e.secret === undefined)).toBe(true);
    const asIssuer = await connect.listWebhookEndpoints({}, { headers: { "x-api-key": svc.issuerKey } });
    expect(asIssuer.endpoints.map((e) => e.endpointId)).not.toContain(made.response?.endpoint?.endpointId);
    grpc.close();
  });
});
