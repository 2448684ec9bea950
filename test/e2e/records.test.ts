import { generateKeyPairSync, randomBytes, randomUUID } from "node:crypto";
import { status as GrpcStatus, Metadata } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OnboardingService } from "../../gen/receipts/v1/onboarding_pb.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import {
  type Envelope,
  get,
  hashPan,
  post,
  receiptBody,
  startService,
  type TestService,
} from "../support/harness.js";

/**
 * Issue 31's ownership and records items over a real server, from the attacker's side: two issuer
 * tenants (bank-a owns the BINs 411111 and 52222211, bank-b owns none) and two merchant tenants, all
 * made through the operator API. The BIN's owner takes a card back from a squatter; a refused
 * registration changes nothing; every key change is in the audit, which issuers and the operator page
 * through without losing an event; merchant signing keys are listed and revoked by their owner; the
 * rightful owner of a reassigned merchantId uses every id.
 */

const TOKEN = `adm_${randomBytes(24).toString("base64url")}`;
type Answer = { status: number; headers: Headers; body: Envelope };
// biome-ignore lint/suspicious/noExplicitAny: response bodies are read field by field
type Any = any;

async function call(
  svc: TestService,
  method: string,
  path: string,
  key: string,
  body?: unknown,
): Promise<Answer> {
  const headers: Record<string, string> = { "x-api-key": key };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${svc.baseUrl}${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Envelope };
}

async function admin(
  svc: TestService,
  method: string,
  path: string,
  body?: unknown,
  token = TOKEN,
): Promise<Answer> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${svc.baseUrl}/admin/v1${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Envelope };
}

function refused(answer: Answer, status: number, code: string): void {
  expect(answer.status, JSON.stringify(answer.body)).toBe(status);
  expect(answer.body.error?.code).toBe(code);
}

function keyed(key: string): Metadata {
  const md = new Metadata();
  md.set("x-api-key", key);
  return md;
}

/** A device key: a P-256 public key (base64 SPKI) and a fresh keyId. */
function deviceKey() {
  const spki = generateKeyPairSync("ec", { namedCurve: "P-256" })
    .publicKey.export({ format: "der", type: "spki" })
    .toString("base64");
  return { keyId: randomUUID(), publicKey: spki };
}

/** Every event of an audit feed, polled `pageSize` at a time from `token` until a page comes back empty. */
async function poll(read: (token: string) => Promise<Answer>, token = "") {
  const events: Any[] = [];
  for (let next = token, pages = 0; pages < 100; pages++) {
    const page = await read(next);
    expect(page.status, JSON.stringify(page.body)).toBe(200);
    const got = page.body.data.events as Any[];
    if (got.length === 0) return { events, token: page.body.data.nextPageToken as string };
    events.push(...got);
    next = page.body.data.nextPageToken;
    expect(typeof next).toBe("string");
  }
  throw new Error("the feed never ended");
}

describe("ownership and records (issue 31), over a running server", () => {
  let svc: TestService;
  const k = { bankA: "", bankB: "", shop1: "", shop2: "" };

  beforeAll(async () => {
    svc = await startService({ env: { ADMIN_TOKEN: TOKEN } });
    for (const [name, tenant, role] of [
      ["bankA", "bank-a", "issuer"],
      ["bankB", "bank-b", "issuer"],
      ["shop1", "shop-1", "merchant"],
      ["shop2", "shop-2", "merchant"],
    ] as const) {
      const made = await admin(svc, "POST", "/api-keys", { tenant, role });
      expect(made.status).toBe(200);
      k[name] = made.body.data.apiKey;
    }
    expect((await admin(svc, "PUT", "/issuers/bank-a/bins", { bins: ["411111", "52222211"] })).status).toBe(
      200,
    );
  });
  afterAll(async () => {
    await svc.close();
  });

  const register = (key: string, pan: string, device = deviceKey(), cardBin?: string) =>
    post(svc, "/api/v1/onboarding/register", key, {
      hashedPan: hashPan(pan),
      ...device,
      ...(cardBin === undefined ? {} : { cardBin }),
    });
  const audit = (key: string, query: string) => get(svc, `/api/v1/audit?${query}`, key);

  describe("the BIN's owner wins", () => {
    it("takes a card back from a squatter, gets its escrow, and both audits say so; the squatter keeps what it had", async () => {
      const pan = "4111114444444444";
      const squat = await register(k.bankB, pan);
      expect(squat.status).toBe(200);
      const toSquatter = await post(
        svc,
        "/api/v1/receipts/encrypt",
        k.shop1,
        receiptBody({ merchantId: "shop1-a", recipientHashedPan: hashPan(pan) }),
      );
      expect(toSquatter.body.data.isEscrowed).toBe(false);
      const withBin = await post(
        svc,
        "/api/v1/receipts/encrypt",
        k.shop1,
        receiptBody({ merchantId: "shop1-a", recipientHashedPan: hashPan(pan), cardBin: "411111" }),
      );
      expect(withBin.body.data.isEscrowed).toBe(true);

      const owner = await register(k.bankA, pan, deviceKey(), "411111");
      expect(owner.status, JSON.stringify(owner.body)).toBe(200);
      expect(owner.body.data).toMatchObject({ superseded: true, releasedReceipts: 1 });
      expect(owner.body.data.userId).not.toBe(squat.body.data.userId);

      // The squatter keeps its user and what it received; it cannot take the card back.
      const kept = await get(svc, `/api/v1/receipts/${squat.body.data.userId}`, k.bankB);
      expect(kept.body.data.receipts.map((r: Any) => r.receiptId)).toEqual([toSquatter.body.data.receiptId]);
      const grant = await post(svc, "/api/v1/keys/grant-access", k.bankB, {
        userId: squat.body.data.userId,
        keyId: squat.body.data.keyId,
      });
      expect(grant.status, JSON.stringify(grant.body)).toBe(200);
      refused(await register(k.bankB, pan), 409, "conflict");
      refused(await register(k.bankB, pan, deviceKey(), "411111"), 403, "forbidden");
      refused(await register(k.bankB, pan, deviceKey(), "41111144"), 403, "forbidden");

      // New receipts go to the owner's user, with or without a cardBin.
      await post(
        svc,
        "/api/v1/receipts/encrypt",
        k.shop2,
        receiptBody({ merchantId: "shop2-a", recipientHashedPan: hashPan(pan) }),
      );
      const ownerList = await get(svc, `/api/v1/receipts/${owner.body.data.userId}`, k.bankA);
      expect(ownerList.body.data.receipts).toHaveLength(2);

      const mine = (await poll((t) => audit(k.bankA, `pageToken=${t}`))).events;
      const taken = mine.find((e) => e.action === "card_binding_conflict" && e.actor === "self");
      expect(taken).toMatchObject({
        userId: owner.body.data.userId,
        subject: expect.stringContaining("bank-b"),
      });
      expect(mine.some((e) => e.action === "key.registered" && e.keyId === owner.body.data.keyId)).toBe(true);
      const theirs = (await poll((t) => audit(k.bankB, `pageToken=${t}`))).events;
      const lost = theirs.find((e) => e.action === "card_binding_conflict");
      expect(lost).toMatchObject({
        actor: "other_tenant",
        userId: squat.body.data.userId,
        previousKeyId: squat.body.data.keyId,
        sourceIp: "",
        requestId: "",
      });
    });

    it("refuses registration inside another issuer's BIN over gRPC too", async () => {
      const onboarding = grpcClient(OnboardingService, svc.port);
      try {
        const answer = await grpcUnary(
          onboarding,
          "register",
          { hashedPan: hashPan("4111115555555555"), ...deviceKey(), cardBin: "411111" },
          keyed(k.bankB),
        );
        expect(answer.error?.code).toBe(GrpcStatus.PERMISSION_DENIED);
      } finally {
        onboarding.close();
      }
    });

    it("asks for 8 digits when 6 cover an owned 8-digit prefix, on every request that takes a cardBin", async () => {
      const pan = hashPan("5222221100000007");
      const checks: Array<[string, Answer]> = [
        ["register", await register(k.bankA, "5222221100000007", deviceKey(), "522222")],
        [
          "lookup",
          await post(svc, "/api/v1/keys/lookup", k.shop1, { recipientHashedPan: pan, cardBin: "522222" }),
        ],
        [
          "encrypt",
          await post(
            svc,
            "/api/v1/receipts/encrypt",
            k.shop1,
            receiptBody({ merchantId: "shop1-a", recipientHashedPan: pan, cardBin: "522222" }),
          ),
        ],
        [
          "create",
          await post(svc, "/api/v1/payments/gateway_a/create", k.shop1, {
            ...receiptBody({ merchantId: "shop1-a", recipientHashedPan: pan, cardBin: "522222" }),
            amount: 950,
          }),
        ],
        [
          "sealed",
          await post(svc, "/api/v1/receipts/sealed", k.shop1, {
            recipientHashedPan: pan,
            cardBin: "522222",
            receiptId: "r-amb",
            merchantId: "shop1-a",
            transactionId: "t-amb",
            keyBundle: {
              keyId: "esc_x",
              algorithm: "RSA-OAEP-256",
              encryptedAesKey: randomBytes(256).toString("base64"),
            },
            ciphertext: randomBytes(32).toString("base64"),
            iv: randomBytes(12).toString("base64"),
            authTag: randomBytes(16).toString("base64"),
          }),
        ],
      ];
      for (const [label, answer] of checks) {
        expect(answer.status, `${label}: ${JSON.stringify(answer.body)}`).toBe(400);
        expect(answer.body.error?.details, label).toContain("cardBin");
      }
      // 8 digits of the owner route to it; 6 digits nobody owns nor covers are simply unowned.
      const eight = await post(svc, "/api/v1/keys/lookup", k.shop1, {
        recipientHashedPan: pan,
        cardBin: "52222211",
      });
      expect(eight.body.data.isEscrowed).toBe(true);
      expect(
        (await post(svc, "/api/v1/keys/lookup", k.shop1, { recipientHashedPan: pan, cardBin: "522223" }))
          .status,
      ).toBe(200);
    });
  });

  it("leaves the card on its new key when a registration with an old keyId and another public key is refused", async () => {
    const pan = "4000000000000093";
    const first = deviceKey();
    await register(k.bankB, pan, first);
    const second = deviceKey();
    await register(k.bankB, pan, second);
    refused(
      await register(k.bankB, pan, { keyId: first.keyId, publicKey: deviceKey().publicKey }),
      409,
      "conflict",
    );
    const looked = await post(svc, "/api/v1/keys/lookup", k.shop1, { recipientHashedPan: hashPan(pan) });
    expect(looked.body.data.keyId).toBe(second.keyId);
  });

  describe("every key change is on record", () => {
    it("pages an issuer's audit 2 at a time without losing one of the changes written meanwhile", async () => {
      const start = (await poll((t) => audit(k.bankB, `pageSize=2&pageToken=${t}`))).token;
      const pan = "4000000000000101";
      const keys = [deviceKey(), deviceKey(), deviceKey(), deviceKey()];
      const seen: Any[] = [];
      let token = start;
      for (const key of keys) {
        expect((await register(k.bankB, pan, key)).status).toBe(200);
        const page = await audit(k.bankB, `pageSize=2&pageToken=${token}`);
        seen.push(...page.body.data.events);
        token = page.body.data.nextPageToken;
      }
      await post(svc, "/api/v1/issuers/escrow-keys", k.bankB, { publicKey: deviceKey().publicKey });
      seen.push(...(await poll((t) => audit(k.bankB, `pageSize=2&pageToken=${t}`), token)).events);
      expect(seen.map((e) => e.action)).toEqual([
        "key.registered",
        "key.rotated",
        "key.rotated",
        "key.rotated",
        "escrow_key.registered",
      ]);
      // Each rotation names the key before and after.
      expect(seen.slice(1, 4).map((e) => [e.previousKeyId, e.keyId])).toEqual([
        [keys[0]?.keyId, keys[1]?.keyId],
        [keys[1]?.keyId, keys[2]?.keyId],
        [keys[2]?.keyId, keys[3]?.keyId],
      ]);
      expect(seen.every((e) => e.actor === "self" && e.sourceIp !== "")).toBe(true);
    });

    it("pages the operator's audit 2 at a time: 5 changes, 5 events, failed logins included, no token in them", async () => {
      const start = (await poll((t) => admin(svc, "GET", `/audit?limit=2&pageToken=${t}`))).token;
      const guess = `adm_${randomBytes(24).toString("base64url")}`;
      refused(await admin(svc, "GET", "/audit", undefined, guess), 401, "unauthorized");
      await admin(svc, "PUT", "/issuers/bank-b/bins", { bins: ["600000"] });
      await admin(svc, "PUT", "/issuers/bank-b/bins", { bins: ["600000", "600001"] });
      const noToken = await fetch(`${svc.baseUrl}/admin/v1/escrow`);
      expect(noToken.status).toBe(401);
      await admin(svc, "PUT", "/merchants/m-ops", { tenant: "shop-1" });
      const events = (await poll((t) => admin(svc, "GET", `/audit?limit=2&pageToken=${t}`), start)).events;
      expect(events.map((e) => e.action)).toEqual([
        "admin.login_failed",
        "admin.bins.set",
        "admin.bins.set",
        "admin.login_failed",
        "admin.merchant.assigned",
      ]);
      expect(events[2]).toMatchObject({
        tenantId: "bank-b",
        subject: "before: 600000; after: 600000,600001",
      });
      expect(events[0]).toMatchObject({
        tenantId: "",
        sourceIp: "127.0.0.1",
        subject: "GET /admin/v1/audit: wrong token",
      });
      expect(JSON.stringify(events)).not.toContain(guess);
      expect(JSON.stringify(events)).not.toContain(TOKEN);
    });

    it("shows an issuer its own events only, refuses merchants, and another tenant's page token", async () => {
      const a = await audit(k.bankA, "pageSize=1000");
      const b = await audit(k.bankB, "pageSize=1000");
      expect(a.body.data.events.length).toBeGreaterThan(0);
      const aSubjects = JSON.stringify(a.body.data.events);
      expect(aSubjects).not.toContain("600001");
      for (const event of b.body.data.events as Any[])
        expect(event.userId === "" || !aSubjects.includes(event.userId)).toBe(true);
      refused(await audit(k.shop1, ""), 403, "forbidden");
      refused(await audit(k.bankB, `pageToken=${a.body.data.nextPageToken}`), 400, "invalid_request");
      // One character of the sealed cursor changed (always to another one: "AA" in place of the last two
      // was the same token whenever it already ended that way, one run in 256).
      const token: string = a.body.data.nextPageToken;
      const tampered = `${token.slice(0, 20)}${token[20] === "A" ? "B" : "A"}${token.slice(21)}`;
      expect(tampered).not.toBe(token);
      refused(await audit(k.bankA, `pageToken=${tampered}`), 400, "invalid_request");
      // A character more decodes to the same bytes (base64 ignores a lone last character): still not ours.
      refused(await audit(k.bankA, `pageToken=${a.body.data.nextPageToken}A`), 400, "invalid_request");
    });

    it("lets an issuer list and revoke its own escrow keys only; a revoked key seals nothing new", async () => {
      const older = await post(svc, "/api/v1/issuers/escrow-keys", k.bankA, {
        publicKey: deviceKey().publicKey,
      });
      const newer = await post(svc, "/api/v1/issuers/escrow-keys", k.bankA, {
        publicKey: deviceKey().publicKey,
      });
      const pan = hashPan("4111116666666666");
      const before = await post(svc, "/api/v1/keys/lookup", k.shop1, {
        recipientHashedPan: pan,
        cardBin: "411111",
      });
      expect(before.body.data.keyId).toBe(newer.body.data.escrowKeyId);
      refused(
        await call(svc, "DELETE", `/api/v1/issuers/escrow-keys/${newer.body.data.escrowKeyId}`, k.bankB),
        404,
        "not_found",
      );
      refused(
        await call(svc, "DELETE", `/api/v1/issuers/escrow-keys/${newer.body.data.escrowKeyId}`, k.shop1),
        403,
        "forbidden",
      );
      expect(
        (await get(svc, "/api/v1/issuers/escrow-keys", k.bankB)).body.data.escrowKeys.map(
          (e: Any) => e.escrowKeyId,
        ),
      ).not.toContain(newer.body.data.escrowKeyId);
      const revoked = await call(
        svc,
        "DELETE",
        `/api/v1/issuers/escrow-keys/${newer.body.data.escrowKeyId}`,
        k.bankA,
      );
      expect(revoked.status).toBe(200);
      expect(revoked.body.data).toMatchObject({
        escrowKey: {
          escrowKeyId: newer.body.data.escrowKeyId,
          current: false,
          revokedAt: expect.any(String),
        },
        currentEscrowKeyId: older.body.data.escrowKeyId,
      });
      const after = await post(svc, "/api/v1/keys/lookup", k.shop1, {
        recipientHashedPan: pan,
        cardBin: "411111",
      });
      expect(after.body.data.keyId).toBe(older.body.data.escrowKeyId);
      const listed = await get(svc, "/api/v1/issuers/escrow-keys", k.bankA);
      expect(listed.body.data.currentEscrowKeyId).toBe(older.body.data.escrowKeyId);
      const events = (await audit(k.bankA, "pageSize=1000")).body.data.events as Any[];
      expect(events.filter((e) => e.action === "escrow_key.revoked").at(-1)).toMatchObject({
        previousKeyId: newer.body.data.escrowKeyId,
        keyId: older.body.data.escrowKeyId,
      });
    });
  });

  it("answers the new routes by role as written here by hand, not as the role table says", async () => {
    const signing = await post(svc, "/api/v1/receipts/signing-keys", k.shop1, {
      merchantId: "shop1-roles",
      publicKey: generateKeyPairSync("ed25519")
        .publicKey.export({ format: "der", type: "spki" })
        .toString("base64"),
    });
    expect(signing.status).toBe(200);
    const mk = signing.body.data.merchantKeyId as string;
    // [method, path, issuer, merchant (shop-2, not the owner), merchant (shop-1, the owner)]
    const matrix: Array<[string, string, number, number, number]> = [
      ["GET", "/api/v1/audit", 200, 403, 403],
      ["GET", "/api/v1/issuers/escrow-keys", 200, 403, 403],
      ["DELETE", "/api/v1/issuers/escrow-keys/iek_nope", 404, 403, 403],
      ["GET", "/api/v1/merchants/shop1-roles/signing-keys", 200, 403, 200],
      ["GET", "/api/v1/merchants/never-used-mid/signing-keys", 404, 404, 404],
      ["DELETE", `/api/v1/merchants/shop1-roles/signing-keys/mk_nope`, 403, 403, 404],
      ["DELETE", `/api/v1/merchants/shop1-roles/signing-keys/${mk}`, 403, 403, 200],
    ];
    for (const [method, path, issuer, other, owner] of matrix) {
      const answers = [
        (await call(svc, method, path, k.bankA)).status,
        (await call(svc, method, path, k.shop2)).status,
        (await call(svc, method, path, k.shop1)).status,
        (await call(svc, method, path, "rk_dev_notakey")).status,
      ];
      expect(answers, `${method} ${path}`).toEqual([issuer, other, owner, 401]);
    }
  });

  it("after a reassignment the rightful owner uses every receipt and transaction id the squatter took", async () => {
    const mid = "m-rightful";
    const pan = hashPan("4000000000000119");
    const squatted = await post(
      svc,
      "/api/v1/receipts/encrypt",
      k.shop2,
      receiptBody({ merchantId: mid, receiptId: "r-1", transactionId: "t-1", recipientHashedPan: pan }),
    );
    expect(squatted.status).toBe(200);
    const paid = await post(svc, "/api/v1/payments/gateway_a/create", k.shop2, {
      ...receiptBody({ merchantId: mid, receiptId: "r-2", transactionId: "t-2", recipientHashedPan: pan }),
      amount: 950,
    });
    expect(paid.status).toBe(200);
    refused(
      await post(
        svc,
        "/api/v1/receipts/encrypt",
        k.shop1,
        receiptBody({ merchantId: mid, receiptId: "r-1" }),
      ),
      403,
      "forbidden",
    );

    expect((await admin(svc, "PUT", `/merchants/${mid}`, { tenant: "shop-1" })).status).toBe(200);
    refused(
      await post(svc, "/api/v1/receipts/encrypt", k.shop2, receiptBody({ merchantId: mid })),
      403,
      "forbidden",
    );
    const reused = await post(
      svc,
      "/api/v1/receipts/encrypt",
      k.shop1,
      receiptBody({ merchantId: mid, receiptId: "r-1", transactionId: "t-1", recipientHashedPan: pan }),
    );
    expect(reused.status, JSON.stringify(reused.body)).toBe(200);
    const repaid = await post(svc, "/api/v1/payments/gateway_a/create", k.shop1, {
      ...receiptBody({ merchantId: mid, receiptId: "r-2", transactionId: "t-2", recipientHashedPan: pan }),
      amount: 950,
    });
    expect(repaid.status, JSON.stringify(repaid.body)).toBe(200);
    const own = await get(svc, `/api/v1/transactions/t-1/receipt?merchantId=${mid}`, k.shop1);
    expect(own.body.data.ciphertext).toBe(reused.body.data.ciphertext);
    refused(await get(svc, `/api/v1/transactions/t-1/receipt?merchantId=${mid}`, k.shop2), 404, "not_found");
    // A second use of the same ids by the owner is its own duplicate again.
    refused(
      await post(
        svc,
        "/api/v1/receipts/encrypt",
        k.shop1,
        receiptBody({ merchantId: mid, receiptId: "r-1" }),
      ),
      409,
      "conflict",
    );
    const events = (await poll((t) => admin(svc, "GET", `/audit?tenant=shop-1&limit=50&pageToken=${t}`)))
      .events;
    expect(
      events.filter((e) => e.action === "merchant.previous_owner_record_deleted").map((e) => e.subject),
    ).toEqual([`${mid}: receipt r-1`, `${mid}: payment of transaction t-2`]);
  });
});
