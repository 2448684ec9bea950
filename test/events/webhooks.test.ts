import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ALL_EVENT_TYPES } from "../../src/domain/event-types.js";
import { get, hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";
import { FAST_EVENTS, type Receiver, startReceiver, until } from "./support.js";
import {
  type CreatedEndpoint,
  createEndpoint,
  encryptFor,
  expectSignedByEndpoint,
  idsOf,
  registerCard,
  typesOf,
} from "./support-flow.js";

/**
 * Every event type reaches each subscribed endpoint of its own tenant exactly once,
 * signed v1 (verified by the `standardwebhooks` package) and v1a (by the client library), over real
 * HTTP to receivers on this machine; and no tenant receives another's.
 */

const verifyV1 = (body: string, headers: Record<string, string>, secret: string) =>
  new Webhook(secret).verify(body, headers);

describe("webhooks: every event type, once per endpoint, signed, to its own tenant only", () => {
  let svc: TestService;
  let issuer2Key: string;
  const receivers: Record<"all" | "some" | "merchant" | "issuer2", Receiver | undefined> = {
    all: undefined,
    some: undefined,
    merchant: undefined,
    issuer2: undefined,
  };
  const endpoints: Partial<Record<keyof typeof receivers, CreatedEndpoint>> = {};
  const recv = (name: keyof typeof receivers) => receivers[name] as Receiver;
  const CARD = "4000000000000002";
  /** A card under issuer-1's BIN 411111, not registered when its receipt arrives. */
  const ESCROW_CARD = "4111110000000009";
  /** A card under issuer-1's BIN that issuer-2 registers first. */
  const CLAIMED_CARD = "4111112222222228";
  let squatter: { userId: string };
  let refundId: string;
  let claimant: { userId: string };

  beforeAll(async () => {
    svc = await startService({ env: FAST_EVENTS });
    issuer2Key = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "issuer-2" });
    for (const name of Object.keys(receivers) as (keyof typeof receivers)[])
      receivers[name] = await startReceiver();
    endpoints.all = await createEndpoint(svc, svc.issuerKey, recv("all").url);
    endpoints.some = await createEndpoint(svc, svc.issuerKey, recv("some").url, [
      "receipt.created",
      "key.changed",
    ]);
    endpoints.merchant = await createEndpoint(svc, svc.merchantKey, recv("merchant").url);
    endpoints.issuer2 = await createEndpoint(svc, issuer2Key, recv("issuer2").url);
    await svc.store.bins.set("issuer-1", ["411111"], new Date());

    // The changes, through the API as a bank and a shop would make them.
    const first = await registerCard(svc, svc.issuerKey, CARD); // key.changed (new)
    await registerCard(svc, svc.issuerKey, CARD); // key.changed (rotation)
    await encryptFor(svc, svc.merchantKey, CARD); // receipt.created
    await encryptFor(svc, svc.merchantKey, ESCROW_CARD, { cardBin: "41111100" }); // escrow.pending
    await registerCard(svc, svc.issuerKey, ESCROW_CARD); // key.changed, escrow.released
    const sale = receiptBody({ recipientHashedPan: hashPan(CARD) });
    const paid = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, {
      ...sale,
      amount: 950,
    }); // payment.created, receipt.created
    expect(paid.status, JSON.stringify(paid.body)).toBe(200);
    const declined = await post(
      svc,
      "/api/v1/payments/gateway_b/create",
      svc.merchantKey,
      receiptBody({ cardNonce: "cnon:card-nonce-declined" }),
    ); // payment.declined
    expect(declined.status).toBe(402);
    const erased = await fetch(`${svc.baseUrl}/api/v1/users/${first.userId}`, {
      method: "DELETE",
      headers: { "x-api-key": svc.issuerKey },
    }); // user.erased
    expect(erased.status).toBe(200);
    // A card of issuer-1's BIN registered first by issuer-2 (key.changed to issuer-2), then by issuer-1
    // naming the BIN: the owner takes it (key.changed, and card.claim_conflict to both).
    squatter = await registerCard(svc, issuer2Key, CLAIMED_CARD);
    claimant = await registerCard(svc, svc.issuerKey, CLAIMED_CARD, { cardBin: "41111122" });
    // A refund after the card's user is gone: payment.refunded to the merchant; its refund receipt
    // goes to escrow without an owner, which tells no issuer.
    const refund = await post(svc, `/api/v1/payments/${paid.body.data.paymentId}/refund`, svc.merchantKey, {
      receiptId: `${sale.receiptId}-refund`,
      merchantId: sale.merchantId,
      merchantName: sale.merchantName,
      transactionId: `${sale.transactionId}-refund`,
      transactionDate: sale.transactionDate,
      currency: sale.currency,
      recipientHashedPan: hashPan(CARD),
      receiptType: "refund",
      originalReceiptId: sale.receiptId,
      amount: 300,
    });
    expect(refund.status, JSON.stringify(refund.body)).toBe(200);
    refundId = refund.body.data.refund.refundId;
  }, 60_000);

  afterAll(async () => {
    await svc?.close();
    for (const r of Object.values(receivers)) await r?.close();
  });

  const ISSUER_1_TYPES = [
    "card.claim_conflict",
    "escrow.pending",
    "escrow.released",
    "key.changed",
    "key.changed",
    "key.changed",
    "key.changed",
    "receipt.created",
    "receipt.created",
    "user.erased",
  ];

  it("delivers each of the issuer's events once to an endpoint subscribed to everything", async () => {
    await until(() => recv("all").received.length >= ISSUER_1_TYPES.length, 15_000, "issuer-1 events");
    await new Promise((r) => setTimeout(r, 300));
    expect(typesOf(recv("all").received)).toEqual(ISSUER_1_TYPES);
    expect(new Set(idsOf(recv("all").received)).size).toBe(ISSUER_1_TYPES.length);
    await expectSignedByEndpoint(recv("all").received, endpoints.all as CreatedEndpoint, verifyV1);
  });

  it("delivers only the subscribed types to an endpoint that asked for some", async () => {
    await until(() => recv("some").received.length >= 6, 15_000, "subscribed events");
    await new Promise((r) => setTimeout(r, 300));
    expect(typesOf(recv("some").received)).toEqual([
      "key.changed",
      "key.changed",
      "key.changed",
      "key.changed",
      "receipt.created",
      "receipt.created",
    ]);
    await expectSignedByEndpoint(recv("some").received, endpoints.some as CreatedEndpoint, verifyV1);
  });

  it("delivers the merchant's payment events to the merchant, and nothing of the issuer's", async () => {
    await until(() => recv("merchant").received.length >= 3, 15_000, "merchant events");
    await new Promise((r) => setTimeout(r, 300));
    expect(typesOf(recv("merchant").received)).toEqual([
      "payment.created",
      "payment.declined",
      "payment.refunded",
    ]);
    const events = recv("merchant").received.map((r) => JSON.parse(r.body));
    const declined = events.find((e) => e.type === "payment.declined");
    // The declined payment is kept, and its event names it.
    expect(declined.data.paymentId).toMatch(/^pay_/);
    const kept = await get(svc, `/api/v1/payments/${declined.data.paymentId}`, svc.merchantKey);
    expect(kept.body.data.status).toBe("declined");
    expect(events.find((e) => e.type === "payment.refunded").data.refundId).toBe(refundId);
    await expectSignedByEndpoint(recv("merchant").received, endpoints.merchant as CreatedEndpoint, verifyV1);
  });

  it("delivers to another issuer its own events only, naming its own user, and the claim to both", async () => {
    await until(() => recv("issuer2").received.length >= 2, 15_000, "issuer-2 events");
    await new Promise((r) => setTimeout(r, 300));
    expect(typesOf(recv("issuer2").received)).toEqual(["card.claim_conflict", "key.changed"]);
    const claims = (name: "issuer2" | "all") =>
      recv(name)
        .received.map((r) => JSON.parse(r.body))
        .filter((e) => e.type === "card.claim_conflict");
    expect(claims("issuer2")).toEqual([
      expect.objectContaining({ data: { userId: squatter.userId, cardBin: "41111122" } }),
    ]);
    expect(claims("all")).toEqual([
      expect.objectContaining({ data: { userId: claimant.userId, cardBin: "41111122" } }),
    ]);
  });

  it("covers every event type across the receivers", () => {
    const seen = new Set(Object.values(receivers).flatMap((r) => typesOf(r?.received ?? [])));
    expect([...seen].sort()).toEqual([...ALL_EVENT_TYPES].sort());
  });

  it("carries ids and times only: never a hashed PAN, the keyed card hash, or receipt content", async () => {
    const bodies = Object.values(receivers).flatMap((r) => r?.received.map((x) => x.body) ?? []);
    const forbidden = [hashPan(CARD), hashPan(ESCROW_CARD), "Corner Coffee", "Flat white"];
    for (const body of bodies) for (const text of forbidden) expect(body).not.toContain(text);
    // The sale's amount as a JSON value (a number or a string); a random id or a timestamp's
    // milliseconds may hold the digits "950", which made a plain substring check fail at random.
    for (const body of bodies) expect(body).not.toMatch(/[:[,]950[,}\]]|"950"/);
    const pending = bodies.map((b) => JSON.parse(b)).find((e) => e.type === "escrow.pending");
    expect(Object.keys(pending.data).sort()).toEqual(["cardBin", "escrowRef", "merchantId", "receiptId"]);
    expect(pending.data.escrowRef).toMatch(/^esr_/);
  });

  it("lets the owning issuer list the card's pending escrow by the event's escrowRef, and no one else", async () => {
    const pending = recv("all")
      .received.map((r) => JSON.parse(r.body))
      .find((e) => e.type === "escrow.pending");
    const ref = pending.data.escrowRef as string;
    const own = await post(svc, "/api/v1/escrow/pending", svc.issuerKey, { escrowRef: ref });
    expect(own.status, JSON.stringify(own.body)).toBe(200);
    const other = await post(svc, "/api/v1/escrow/pending", issuer2Key, { escrowRef: ref });
    expect(other.status).toBe(400);
    expect(other.body.error?.details).toMatch(/escrowRef: is not an escrow reference sent to this tenant/);
  });

  it("keeps each endpoint's delivery log, and shows it to its own tenant only", async () => {
    const endpoint = endpoints.all as CreatedEndpoint;
    const log = await get(
      svc,
      `/api/v1/webhooks/deliveries?endpointId=${endpoint.endpointId}&pageSize=200`,
      svc.issuerKey,
    );
    expect(log.status).toBe(200);
    expect(log.body.data.deliveries).toHaveLength(ISSUER_1_TYPES.length);
    for (const d of log.body.data.deliveries) {
      expect(d).toMatchObject({ endpointId: endpoint.endpointId, status: "delivered", attempts: 1 });
      expect(d.attemptLog).toEqual([expect.objectContaining({ statusCode: 204, error: "" })]);
    }
    const stranger = await get(
      svc,
      `/api/v1/webhooks/deliveries?endpointId=${endpoint.endpointId}`,
      issuer2Key,
    );
    expect(stranger.status).toBe(404);
    const merchant = await get(
      svc,
      `/api/v1/webhooks/deliveries?endpointId=${endpoint.endpointId}`,
      svc.merchantKey,
    );
    expect(merchant.status).toBe(404);
  });

  it("replays one event to an endpoint with the same webhook-id; another tenant cannot", async () => {
    const endpoint = endpoints.all as CreatedEndpoint;
    const first = recv("all").received[0];
    const eventId = String(first?.headers["webhook-id"]);
    const before = recv("all").received.length;
    const replayed = await post(
      svc,
      `/api/v1/webhooks/endpoints/${endpoint.endpointId}/replay`,
      svc.issuerKey,
      {
        eventId,
      },
    );
    expect(replayed.status, JSON.stringify(replayed.body)).toBe(200);
    expect(replayed.body.data).toMatchObject({ eventId, status: "pending", attempts: 0 });
    await until(() => recv("all").received.length === before + 1, 10_000, "the replay");
    const again = recv("all").received.at(-1);
    expect(again?.headers["webhook-id"]).toBe(eventId);
    expect(again?.body).toBe(first?.body);
    await expectSignedByEndpoint([again as never], endpoint, verifyV1);
    // Another tenant can neither replay to this endpoint nor replay this event to its own.
    const intoOther = await post(
      svc,
      `/api/v1/webhooks/endpoints/${endpoint.endpointId}/replay`,
      issuer2Key,
      {
        eventId,
      },
    );
    expect(intoOther.status).toBe(404);
    const toOwn = await post(
      svc,
      `/api/v1/webhooks/endpoints/${endpoints.issuer2?.endpointId}/replay`,
      issuer2Key,
      {
        eventId,
      },
    );
    expect(toOwn.status).toBe(404);
  });

  it("shows each tenant its own events in the feed, in order, with nothing of another tenant's", async () => {
    const own = await get(svc, "/api/v1/events?pageSize=200", svc.issuerKey);
    expect(own.status).toBe(200);
    expect(own.body.data.events.map((e: { type: string }) => e.type).sort()).toEqual(ISSUER_1_TYPES);
    const ids = own.body.data.events.map((e: { id: string }) => e.id);
    expect(new Set(ids)).toEqual(new Set(idsOf(recv("all").received)));
    const other = await get(svc, "/api/v1/events", issuer2Key);
    // In feed order: its registration, then the claim that took the card.
    expect(other.body.data.events.map((e: { type: string }) => e.type)).toEqual([
      "key.changed",
      "card.claim_conflict",
    ]);
    const foreignCursor = await get(svc, `/api/v1/events?after=${ids[0]}`, issuer2Key);
    expect(foreignCursor.status).toBe(404);
  });
});
