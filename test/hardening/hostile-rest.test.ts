import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ReceiptJson, type SealedEnvelope, sealReceipt } from "../../src/client/webcrypto.js";
import { hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";
import {
  type Hostile,
  hostileBodies,
  hostileKeys,
  hostilePrivateKeys,
  hostileValues,
  RECEIPT_RULE_BREAKERS,
} from "./cases.js";
import {
  type Answer,
  type Cardholder,
  errorLines,
  expectRestRefusal,
  fillPath,
  REST_ROUTES,
  SIGNING_KEY,
  seedTargets,
  send,
  UNLIMITED_TIERS,
} from "./support.js";

/** A POST route of the REST surface with a body it accepts. */
interface PostRoute {
  path: string;
  key: () => string;
  body: () => Record<string, unknown>;
}

/** Path segments no id looks like: traversal, encoded operators, bad UTF-8, header injection, ... */
const ODD_SEGMENTS = [
  "%00",
  "%2F",
  "%2e%2e",
  "%2e%2e%2f%2e%2e%2fetc",
  "%7B%22%24ne%22%3Anull%7D",
  "a".repeat(500),
  "%E0%A4%A",
  "%C3%28",
  "%F0%9F%92%A9",
  "%EF%BF%BF",
  "x%0D%0AX-Injected:%201",
  "%25",
  "__proto__",
  "constructor",
  "%20",
  "*",
  "'%20OR%201=1--",
];

/** Fields whose content the service cannot check: any value of the right type and size is valid. */
const OPAQUE_FIELDS: ReadonlySet<string> = new Set(["ciphertext"]);

describe("hostile input over REST: every route refuses it with a 4xx in the envelope", () => {
  const logLines: string[] = [];
  let svc: TestService;
  let holder: Cardholder;
  let tokenId: string;
  let paymentId: string;
  let paymentReceiptId: string;
  let receipt: Record<string, unknown>;
  let sealed: SealedEnvelope;
  let cases = 0;

  beforeAll(async () => {
    svc = await startService({ env: { RATE_LIMIT_TIERS: UNLIMITED_TIERS }, logLines });
    ({ holder, receipt, paymentId, paymentReceiptId, tokenId } = await seedTargets(svc));
    const plain = receiptBody({ receiptId: "hostile-sealed", merchantId: "merchant-sealed-hostile" });
    sealed = await sealReceipt(plain as unknown as ReceiptJson, holder.publicKey, { keyId: holder.keyId });
  });

  afterAll(async () => {
    console.log(`hardening: ${cases} hostile REST requests refused`);
    await svc.close();
  });

  /** A request each RPC accepts, as its REST body; every field of it is attacked in turn. */
  const validBodies = (): Record<string, Record<string, unknown>> => ({
    GenerateKeys: {},
    Register: { hashedPan: hashPan("4000000000000002"), publicKey: holder.publicKey, keyId: holder.keyId },
    GrantAccess: { userId: holder.userId, keyId: holder.keyId },
    EncryptReceipt: receiptBody(),
    CreatePayment: { ...receiptBody(), amount: 950 },
    RefundPayment: {
      ...receiptBody({ recipientHashedPan: holder.hashedPan }),
      receiptType: "refund",
      originalReceiptId: paymentReceiptId,
      // A refund receipt's total is the amount refunded: the whole payment here.
      amount: 950,
    },
    DecryptPayment: { paymentId, tokenId, privateKey: holder.privateKey },
    DecryptReceipt: { receiptId: receipt.receiptId, tokenId, privateKey: holder.privateKey },
    // A merchantId of its own: a key registered here must not make other tests' receipts need signatures.
    RegisterSigningKey: { merchantId: "merchant-signing-hostile", publicKey: SIGNING_KEY },
    LookupKey: { recipientHashedPan: holder.hashedPan },
    KtSelfCheck: { recipientHashedPan: holder.hashedPan },
    // The issuer's root signing key (pending until an operator confirms it), and a signer's revocation.
    RegisterIssuerSigningKey: { publicKey: SIGNING_KEY },
    RevokeIssuerSigningKey: { statement: "e30", signature: "A".repeat(86) },
    RegisterEscrowKey: { publicKey: holder.publicKey },
    StoreSealedReceipt: {
      recipientHashedPan: holder.hashedPan,
      receiptId: sealed.receiptId,
      merchantId: sealed.merchantId,
      transactionId: sealed.transactionId,
      keyBundle: sealed.keyBundle,
      ciphertext: sealed.ciphertext,
      iv: sealed.iv,
      authTag: sealed.authTag,
    },
    ListPendingEscrow: { hashedPan: holder.hashedPan },
    CreateWebhookEndpoint: { url: "http://127.0.0.1:9/hooks", events: ["*"] },
    RotateWebhookSecret: { rotateSigningKey: true },
    ReplayWebhookEvent: { eventId: "evt_unknown" },
    ReleaseEscrow: {
      userId: holder.userId,
      receipts: [{ merchantId: sealed.merchantId, receiptId: sealed.receiptId, keyBundle: sealed.keyBundle }],
    },
  });

  /** Every POST route of the protos, by RPC name, with a body it accepts. */
  const routes = (): Record<string, PostRoute> =>
    Object.fromEntries(
      REST_ROUTES.filter((r) => r.verb === "POST").map((r) => [
        r.rpc,
        {
          path: fillPath(r.template, { gateway: "gateway_a", payment_id: paymentId }),
          key: () => (r.role === "issuer" ? svc.issuerKey : svc.merchantKey),
          body: () => validBodies()[r.rpc] ?? {},
        },
      ]),
    );

  /** POSTs raw JSON text (or bytes) and asserts a refusal. */
  async function refusePost(route: PostRoute, body: string | Uint8Array, label: string, headers = {}) {
    cases += 1;
    const answer = await send(svc, "POST", route.path, {
      body,
      headers: { "content-type": "application/json", "x-api-key": route.key(), ...headers },
    });
    return expectRestRefusal(answer, label);
  }

  async function refuseGet(path: string, key: string, label: string): Promise<Answer> {
    cases += 1;
    const answer = await send(svc, "GET", path, { headers: { "x-api-key": key } });
    expectRestRefusal(answer, label);
    return answer;
  }

  /** The JSON text of `body` with `field` set to the hostile value (raw text spliced in as is). */
  function withField(body: Record<string, unknown>, field: string, hostile: Hostile): string {
    const marker = "\u0001HOSTILE\u0001";
    const text = JSON.stringify({ ...body, [field]: marker });
    const raw = "raw" in hostile ? String(hostile.raw) : JSON.stringify(hostile.value);
    return text.replace(JSON.stringify(marker), raw);
  }

  /** Runs `jobs` a few at a time: a barrage, but one that never hides which case failed. */
  async function inBatches<T>(items: T[], job: (item: T) => Promise<unknown>): Promise<void> {
    for (let i = 0; i < items.length; i += 8) await Promise.all(items.slice(i, i + 8).map(job));
  }

  it("refuses whole bodies that are not what the route reads, on every POST route", async () => {
    for (const [name, route] of Object.entries(routes())) {
      const valid = JSON.stringify(route.body());
      await inBatches(hostileBodies(valid), (h) =>
        refusePost(route, "raw" in h ? h.raw : JSON.stringify(h.value), `${name}: ${h.label}`),
      );
      if (name !== "GenerateKeys") await refusePost(route, "", `${name}: empty body`);
    }
    // Invalid bytes in a free-text field that would otherwise be sealed as U+FFFD, silently.
    const text = JSON.stringify(receiptBody({ merchantName: "Caf@" }));
    const at = text.indexOf("@");
    const bytes = Buffer.concat([
      Buffer.from(text.slice(0, at)),
      Buffer.from([0xe9]),
      Buffer.from(text.slice(at + 1)),
    ]);
    const error = await refusePost(routes().EncryptReceipt as PostRoute, bytes, "Latin-1 é in merchantName");
    expect(error.details).toBe("body: is not valid JSON");
  });

  it("refuses wrong types, operators, pollution keys and huge values in every field of every POST route", async () => {
    for (const [name, route] of Object.entries(routes())) {
      const body = route.body();
      for (const [field, valid] of Object.entries(body)) {
        // A merchant-sealed ciphertext is opaque: any bytes within the body limit are a receipt the
        // service cannot and must not judge (the next test sends one of 675,000 bytes).
        const cases = hostileValues(valid).filter(
          (h) => !(OPAQUE_FIELDS.has(field) && h.label === "huge string"),
        );
        await inBatches(cases, (h) =>
          refusePost(route, withField(body, field, h), `${name}.${field}: ${h.label}`),
        );
        const { [field]: _dropped, ...missing } = body;
        if (!["totalAmount", "items"].includes(field)) {
          await refusePost(route, JSON.stringify(missing), `${name}: without ${field}`);
        }
      }
    }
  });

  it("stores an opaque sealed ciphertext of any bytes within the body limit, and refuses one over it", async () => {
    const route = routes().StoreSealedReceipt as PostRoute;
    const big = { ...route.body(), receiptId: "hostile-sealed-big", ciphertext: "x".repeat(900_000) };
    const stored = await post(svc, route.path, svc.merchantKey, big);
    expect(stored.status).toBe(200);
    expect(stored.body.data.ciphertext).toBe(big.ciphertext);
    const over = { ...big, receiptId: "hostile-sealed-over", ciphertext: "x".repeat(1_100_000) };
    expect((await refusePost(route, JSON.stringify(over), "ciphertext over the body limit")).code).toBe(
      "payload_too_large",
    );
  });

  it("refuses receipts that break a rule, on encrypt and on create", async () => {
    const { EncryptReceipt: encrypt, CreatePayment: create } = routes() as Record<string, PostRoute>;
    for (const route of [encrypt, create] as PostRoute[]) {
      await inBatches([...RECEIPT_RULE_BREAKERS], ([field, value]) =>
        refusePost(route, JSON.stringify({ ...route.body(), [field]: value }), `${route.path} ${field}`),
      );
    }
    for (const amount of [0, -5, 0.5, 2 ** 53, "950"]) {
      await refusePost(create as PostRoute, JSON.stringify({ ...receiptBody(), amount }), `amount ${amount}`);
    }
    const gatewayB = { ...(create as PostRoute), path: "/api/v1/payments/gateway_b/create" };
    await refusePost(gatewayB, JSON.stringify({ ...receiptBody(), amount: 1 }), "gateway_b: amount mismatch");
    await refusePost(
      gatewayB,
      JSON.stringify({ ...receiptBody(), cardNonce: "n".repeat(300) }),
      "long nonce",
    );
    const declined = await refusePost(
      gatewayB,
      JSON.stringify({ ...receiptBody(), cardNonce: "cnon:card-nonce-declined" }),
      "declined card",
    );
    expect(declined.code).toBe("payment_declined");
    await refusePost(
      encrypt as PostRoute,
      JSON.stringify({ ...receiptBody(), amount: 1 }),
      "encrypt: amount",
    );
  });

  it("refuses public keys that are not RSA-2048+ and private keys that are not the grant's key", async () => {
    const { Register: register, DecryptPayment: decrypt } = routes() as Record<string, PostRoute>;
    for (const [label, publicKey] of hostileKeys()) {
      const error = await refusePost(
        register as PostRoute,
        JSON.stringify({ ...(register as PostRoute).body(), publicKey }),
        `register: ${label}`,
      );
      expect(error.code, label).toBe("invalid_request");
      expect(error.details, label).toMatch(/^publicKey: /);
    }
    for (const keyId of ["not-a-uuid", "00000000-0000-1000-8000-000000000000", "Z".repeat(36)]) {
      await refusePost(
        register as PostRoute,
        JSON.stringify({ ...(register as PostRoute).body(), keyId }),
        keyId,
      );
    }
    for (const [label, privateKey] of hostilePrivateKeys()) {
      const error = await refusePost(
        decrypt as PostRoute,
        JSON.stringify({ ...(decrypt as PostRoute).body(), privateKey }),
        `decrypt: ${label}`,
      );
      expect(["invalid_request", "forbidden"], label).toContain(error.code);
    }
  });

  it("refuses odd segments in every path variable of every route, and odd query strings", async () => {
    for (const route of REST_ROUTES.filter((r) => r.template.includes("{"))) {
      const key = route.role === "issuer" ? svc.issuerKey : svc.merchantKey;
      for (const segment of ODD_SEGMENTS) {
        const path = fillPath(route.template, {}, segment);
        if (route.verb === "GET") await refuseGet(path, key, path);
        else
          await refusePost({ path, key: () => key, body: () => ({}) }, JSON.stringify(receiptBody()), path);
      }
    }
    const cursor = (at: number) => Buffer.from(JSON.stringify([at, "rcp_x"])).toString("base64url");
    for (const query of [
      "pageSize=abc",
      "pageSize=-1",
      "pageSize=201",
      "pageSize=1e3",
      "pageSize=99999999999999999999",
      "pageSize=2147483648",
      "pageSize=1&pageSize=2",
      // One field under both its names: which value would win is the server's guess.
      "page_size=1&pageSize=2",
      "pageSize=2&page_size=1",
      "pageToken=!!!",
      `pageToken=${Buffer.from("garbage").toString("base64url")}`,
      `pageToken=${cursor(9e15)}`,
      `pageToken=${cursor(-9e15)}`,
      `pageToken=${"A".repeat(600)}`,
      "unknown=1",
      "pageSize[$ne]=1",
      "__proto__[admin]=1",
      "constructor=1",
      `userId=${holder.userId}`,
    ]) {
      await refuseGet(`/api/v1/receipts/${holder.userId}?${query}`, svc.issuerKey, `receipts?${query}`);
    }
    for (const query of [
      "pageSize=abc",
      "pageSize=-1",
      "pageSize=1001",
      "pageSize=1&pageSize=2",
      "after=yesterday",
      "after=2026-13-45T99:00:00Z",
      "after=2026-02-30T00:00:00Z",
      "pageToken=!!!",
      `pageToken=${Buffer.from("a12").toString("base64url")}`,
      `pageToken=${"A".repeat(300)}`,
      `pageToken=${cursor(1)}`,
      "tenant=issuer-2",
      "after[$gt]=1",
    ]) {
      await refuseGet(`/api/v1/audit?${query}`, svc.issuerKey, `audit?${query}`);
    }
    for (const query of [
      "merchantId=a&merchantId=b",
      "merchant_id=a&merchantId=b",
      "merchantId[$ne]=",
      "foo=1",
      "transactionId=x",
    ]) {
      await refuseGet(
        `/api/v1/transactions/${receipt.transactionId}/receipt?${query}`,
        svc.merchantKey,
        query,
      );
    }
  });

  it("refuses bad content types, oversize bodies, bad API keys and bad Idempotency-Keys", async () => {
    const encrypt = routes().EncryptReceipt as PostRoute;
    const body = JSON.stringify(receiptBody());
    for (const type of [
      "text/plain",
      "application/x-www-form-urlencoded",
      "application/xml",
      "multipart/form-data",
    ]) {
      const error = await refusePost(encrypt, body, type, { "content-type": type });
      expect(error.code).toBe("unsupported_media_type");
    }
    cases += 1;
    const noType = await send(svc, "POST", encrypt.path, { body, headers: { "x-api-key": svc.merchantKey } });
    expectRestRefusal(noType, "no content type");
    const big = await refusePost(
      encrypt,
      JSON.stringify({ ...receiptBody(), merchantName: "x".repeat(1_100_000) }),
      "1.1 MB",
    );
    expect(big.code).toBe("payload_too_large");
    for (const key of [
      "",
      "rk_dev_short",
      `rk_live_${"a".repeat(43)}`,
      "x".repeat(8_000),
      '{"$ne":null}',
      svc.issuerKey,
    ]) {
      await refusePost(encrypt, body, `api key ${key.slice(0, 20)}`, { "x-api-key": key });
    }
    const create = routes().CreatePayment as PostRoute;
    // An empty one too: sent, it means the caller wanted the call idempotent (a variable left unset),
    // and running it without a key would let the retry charge twice.
    for (const key of ["", "k".repeat(256), "has space", "\u00e9t\u00e9", "tab\tinside"]) {
      const error = await refusePost(
        create,
        JSON.stringify(create.body()),
        `Idempotency-Key ${key.slice(0, 10)}`,
        {
          "idempotency-key": key,
        },
      );
      expect(error.code).toBe("invalid_request");
    }
  });

  it("knows a valid request of every POST route, so that every field of every route is attacked", () => {
    expect(Object.keys(routes()).sort()).toEqual(Object.keys(validBodies()).sort());
  });

  it("still serves a normal request correctly after the barrage, and no request was a server error", async () => {
    const fresh = receiptBody({ recipientHashedPan: holder.hashedPan, merchantName: "After The Storm" });
    expect((await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, fresh)).status).toBe(200);
    const opened = await post(svc, "/api/v1/receipts/decrypt", svc.issuerKey, {
      receiptId: fresh.receiptId,
      tokenId,
      privateKey: holder.privateKey,
    });
    expect(opened.status).toBe(200);
    expect(opened.body.data.merchantName).toBe("After The Storm");
    // The refund body every hostile variant was made from is valid, and none of them refunded a cent.
    const refund = routes().RefundPayment as PostRoute;
    const refunded = await post(svc, refund.path, refund.key(), refund.body());
    expect(refunded.status).toBe(200);
    expect(refunded.body.data.payment.refundedAmount).toBe(950);
    expect(errorLines(logLines)).toEqual([]);
    expect(cases).toBeGreaterThan(500);
  });
});
