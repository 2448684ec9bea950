import { createHmac, randomBytes } from "node:crypto";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { status as GrpcStatus, Metadata } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
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
import { dumpableMemory } from "../support/store-dump.js";

/**
 * One card registered by both its hashed PAN and its PAR, against a running server: a tap routed by
 * the PAR reaches the user registered by hashed PAN (and the reverse), escrow under either reference
 * is released to it, listing and decrypt see both, erasure leaves neither reference behind. And from
 * the attacker's side: another tenant's PAR, a PAR inside another issuer's BIN, two registrations
 * joined by one call, all refused with nothing changed and nothing said of the victim.
 */

const TOKEN = `adm_${randomBytes(24).toString("base64url")}`;
const PEPPER = "alias-test-pepper-alias-test-pepper-alias";

function newPar(): string {
  const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  return Array.from(randomBytes(29), (b) => alphabet[b % alphabet.length]).join("");
}

/** A fresh hashed PAN (a random 16-digit card). */
function newHashedPan(): string {
  return hashPan(`4${Array.from(randomBytes(15), (b) => b % 10).join("")}`);
}

type Answer = { status: number; body: Envelope };

// Many calls per test over a real socket: on a loaded machine some take longer than the default limit.
describe("one card by hashed PAN and PAR", { timeout: 180_000 }, () => {
  let svc: TestService;
  let bankB: string;
  const logLines: string[] = [];
  const sent: string[] = [];

  beforeAll(async () => {
    svc = await startService({ env: { ADMIN_TOKEN: TOKEN, HASHED_PAN_PEPPER: PEPPER }, logLines });
    bankB = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "bank-b" });
  });
  afterAll(async () => {
    await svc?.close();
  });

  async function keys(issuerKey = svc.issuerKey) {
    const made = await post(svc, "/api/v1/onboarding/generate-keys", issuerKey, {});
    expect(made.status).toBe(200);
    return made.body.data as { keyId: string; publicKey: string; privateKey: string };
  }

  async function register(
    card: Record<string, string>,
    issuerKey = svc.issuerKey,
    pair?: Awaited<ReturnType<typeof keys>>,
  ) {
    const k = pair ?? (await keys(issuerKey));
    const reg = await post(svc, "/api/v1/onboarding/register", issuerKey, {
      ...card,
      publicKey: k.publicKey,
      keyId: k.keyId,
    });
    return { keyId: k.keyId, publicKey: k.publicKey, privateKey: k.privateKey, reg };
  }

  const tap = (par: string, extra: Record<string, unknown> = {}) =>
    receiptBody({ recipientHashedPan: undefined, recipientPar: par, ...extra });
  const byPan = (hashedPan: string) => receiptBody({ recipientHashedPan: hashedPan });

  async function encrypt(body: Record<string, unknown>): Promise<Answer> {
    const answer = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body);
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    return answer;
  }

  async function listed(userId: string, key = svc.issuerKey): Promise<string[]> {
    const listing = await get(svc, `/api/v1/receipts/${userId}`, key);
    expect(listing.status, JSON.stringify(listing.body)).toBe(200);
    return (listing.body.data.receipts as { receiptId: string }[]).map((r) => r.receiptId).sort();
  }

  async function decrypt(userId: string, keyId: string, privateKey: string, receiptId: string) {
    const grant = await post(svc, "/api/v1/keys/grant-access", svc.issuerKey, { userId, keyId });
    expect(grant.status).toBe(200);
    return post(svc, "/api/v1/receipts/decrypt", svc.issuerKey, {
      receiptId,
      tokenId: grant.body.data.tokenId,
      privateKey,
    });
  }

  it("links a PAR to a card registered by hashed PAN: the waiting tap is released, later taps go straight to the user", async () => {
    const [hashedPan, par] = [newHashedPan(), newPar()];
    sent.push(hashedPan, par);
    const first = await register({ hashedPan });
    expect(first.reg.status).toBe(200);
    const userId = first.reg.body.data.userId as string;
    const early = tap(par, { merchantName: "Early Tap" });
    expect((await encrypt(early)).body.data.isEscrowed).toBe(true);

    // The same key again, now naming both references: nothing rotates, the tap is released.
    const linked = await register({ hashedPan, par }, svc.issuerKey, first);
    expect(linked.reg.status, JSON.stringify(linked.reg.body)).toBe(200);
    expect(linked.reg.body.data, JSON.stringify(linked.reg.body)).toMatchObject({
      userId,
      keyId: first.keyId,
      releasedReceipts: 1,
    });

    const later = tap(par, { merchantName: "Later Tap" });
    expect((await encrypt(later)).body.data).toMatchObject({ keyId: first.keyId, isEscrowed: false });
    const card = byPan(hashedPan);
    expect((await encrypt(card)).body.data).toMatchObject({ keyId: first.keyId, isEscrowed: false });
    const lookup = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, { recipientPar: par });
    expect(lookup.body.data).toMatchObject({ keyId: first.keyId, isEscrowed: false });

    expect(await listed(userId)).toEqual([early.receiptId, later.receiptId, card.receiptId].sort());
    for (const [receipt, name] of [
      [early, "Early Tap"],
      [later, "Later Tap"],
    ] as const) {
      const opened = await decrypt(userId, first.keyId, first.privateKey, receipt.receiptId as string);
      expect(opened.status, JSON.stringify(opened.body)).toBe(200);
      expect(opened.body.data.merchantName).toBe(name);
    }
    const audit = await get(svc, "/api/v1/audit", svc.issuerKey);
    expect(audit.body.data.events).toEqual(
      expect.arrayContaining([expect.objectContaining({ action: "card.alias_added", userId })]),
    );
  });

  it("registers both at once and releases what waited under each reference, whatever the order of registration", async () => {
    const [hashedPan, par] = [newHashedPan(), newPar()];
    sent.push(hashedPan, par);
    const waiting = [tap(par), byPan(hashedPan)];
    for (const r of waiting) expect((await encrypt(r)).body.data.isEscrowed).toBe(true);
    const { reg, keyId, privateKey } = await register({ par, hashedPan });
    expect(reg.status, JSON.stringify(reg.body)).toBe(200);
    expect(reg.body.data.releasedReceipts).toBe(2);
    const userId = reg.body.data.userId as string;
    expect(await listed(userId)).toEqual(waiting.map((r) => r.receiptId as string).sort());
    for (const r of waiting) {
      expect((await decrypt(userId, keyId, privateKey, r.receiptId as string)).status).toBe(200);
    }
    // Registered by PAR first, linked to its hashed PAN by a rotation: one user still.
    const [pan2, par2] = [newHashedPan(), newPar()];
    sent.push(pan2, par2);
    const byPar = await register({ par: par2 });
    const rotated = await register({ hashedPan: pan2, par: par2 });
    expect(rotated.reg.status).toBe(200);
    expect(rotated.reg.body.data.userId).toBe(byPar.reg.body.data.userId);
    const viaPan = await encrypt(byPan(pan2));
    expect(viaPan.body.data).toMatchObject({ keyId: rotated.keyId, isEscrowed: false });
  });

  it("refuses another tenant's PAR or hashed PAN in any combination: conflict, nothing changed, nothing told", async () => {
    const [hashedPan, par] = [newHashedPan(), newPar()];
    sent.push(hashedPan, par);
    const victim = await register({ hashedPan, par });
    expect(victim.reg.status).toBe(200);
    const attempts = [
      { par },
      { hashedPan },
      { hashedPan: newHashedPan(), par },
      { hashedPan, par: newPar() },
    ];
    const answers: string[] = [];
    for (const card of attempts) {
      const { reg } = await register(card, bankB);
      expect(reg.status, JSON.stringify(reg.body)).toBe(409);
      expect(reg.body.error?.code).toBe("conflict");
      answers.push(reg.body.error?.message ?? "");
      // Nothing of the victim: no userId, no keyId, no reference.
      for (const secret of [victim.reg.body.data.userId, victim.keyId, hashedPan, par]) {
        expect(JSON.stringify(reg.body)).not.toContain(secret);
      }
    }
    // One answer for every combination: which reference is taken is not told.
    expect(new Set(answers).size).toBe(1);
    // Taps by the PAR still reach the victim alone.
    expect((await encrypt(tap(par))).body.data).toMatchObject({ keyId: victim.keyId, isEscrowed: false });
  });

  it("refuses a PAR linked inside another issuer's BIN (forbidden), and the BIN owner's link supersedes a squatter", async () => {
    const bins = await fetch(`${svc.baseUrl}/admin/v1/issuers/issuer-1/bins`, {
      method: "PUT",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ bins: ["55000011"] }),
    });
    expect(bins.status).toBe(200);
    const [hashedPan, par] = [newHashedPan(), newPar()];
    sent.push(hashedPan, par);
    const squat = await register({ hashedPan, par, cardBin: "55000011" }, bankB);
    expect(squat.reg.status).toBe(403);
    expect(squat.reg.body.error?.code).toBe("forbidden");
    // Without a cardBin the squatter gets the card until the BIN's owner registers it.
    const quiet = await register({ hashedPan, par }, bankB);
    expect(quiet.reg.status).toBe(200);
    const owner = await register({ par, hashedPan, cardBin: "55000011" });
    expect(owner.reg.status, JSON.stringify(owner.reg.body)).toBe(200);
    expect(owner.reg.body.data.superseded).toBe(true);
    for (const body of [tap(par), byPan(hashedPan)]) {
      expect((await encrypt(body)).body.data).toMatchObject({ keyId: owner.keyId, isEscrowed: false });
    }
  });

  it("refuses to join two registrations of the caller's own into one: conflict, both left as they were", async () => {
    const [hashedPan, par] = [newHashedPan(), newPar()];
    sent.push(hashedPan, par);
    const a = await register({ hashedPan });
    const b = await register({ par });
    const joined = await register({ hashedPan, par });
    expect(joined.reg.status).toBe(409);
    expect(joined.reg.body.error?.code).toBe("conflict");
    expect((await encrypt(byPan(hashedPan))).body.data.keyId).toBe(a.keyId);
    expect((await encrypt(tap(par))).body.data.keyId).toBe(b.keyId);
    // A second PAR for a card that has one is refused the same way, and so is a second hashed PAN.
    const [pan2, par2] = [newHashedPan(), newPar()];
    const both = await register({ hashedPan: pan2, par: par2 });
    expect(both.reg.status).toBe(200);
    expect((await register({ hashedPan: pan2, par: newPar() }, svc.issuerKey, both)).reg.status).toBe(409);
    expect((await register({ hashedPan: newHashedPan(), par: par2 }, svc.issuerKey, both)).reg.status).toBe(
      409,
    );
  });

  it("erases both references: every receipt goes, both route to escrow again, neither keyed reference is left", async () => {
    const [hashedPan, par] = [newHashedPan(), newPar()];
    sent.push(hashedPan, par);
    const { reg } = await register({ hashedPan, par });
    const userId = reg.body.data.userId as string;
    for (const body of [tap(par), byPan(hashedPan)]) await encrypt(body);
    const erased = await fetch(`${svc.baseUrl}/api/v1/users/${userId}`, {
      method: "DELETE",
      headers: { "x-api-key": svc.issuerKey },
    });
    expect(erased.status).toBe(200);
    expect(((await erased.json()) as Envelope).data).toMatchObject({ deletedReceipts: 2, deletedKeys: 1 });
    for (const card of [{ recipientPar: par }, { recipientHashedPan: hashedPan }]) {
      const lookup = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, card);
      expect(lookup.body.data.isEscrowed).toBe(true);
    }
    const keyed = [
      createHmac("sha256", PEPPER).update(`par:${par}`).digest("hex"),
      createHmac("sha256", PEPPER).update(hashedPan).digest("hex"),
    ];
    const left = JSON.stringify(dumpableMemory(svc.store).dump());
    expect(keyed.filter((k) => left.includes(k))).toEqual([]);
    // The same PAR can now be registered by another issuer, as an unregistered card's.
    expect((await register({ par }, bankB)).reg.status).toBe(200);
  });

  it("takes both references over gRPC and Connect, and a malformed one is named", async () => {
    const [hashedPan, par] = [newHashedPan(), newPar()];
    sent.push(hashedPan, par);
    const pair = await keys();
    const onboarding = grpcClient(OnboardingService, svc.port);
    try {
      const metadata = new Metadata();
      metadata.set("x-api-key", svc.issuerKey);
      const registered = await grpcUnary<{ userId: string }>(
        onboarding,
        "register",
        { hashedPan, par, publicKey: pair.publicKey, keyId: pair.keyId },
        metadata,
      );
      expect(registered.error).toBeUndefined();
      const bad = await grpcUnary(
        onboarding,
        "register",
        { hashedPan, par: par.toLowerCase(), publicKey: pair.publicKey, keyId: pair.keyId },
        metadata,
      );
      expect(bad.error?.code).toBe(GrpcStatus.INVALID_ARGUMENT);
    } finally {
      onboarding.close();
    }
    const connect = createClient(
      KeysService,
      createConnectTransport({ baseUrl: svc.baseUrl, httpVersion: "1.1" }),
    );
    const headers = { "x-api-key": svc.merchantKey };
    for (const card of [{ recipientPar: par }, { recipientHashedPan: hashedPan }]) {
      const found = await connect.lookupKey(card, { headers });
      expect(found).toMatchObject({ keyId: pair.keyId, isEscrowed: false });
    }
  });

  it("moves a card by operator transfer: the squatter's key gets nothing more, the new issuer's registration takes the escrow", async () => {
    const [hashedPan, par] = [newHashedPan(), newPar()];
    sent.push(hashedPan, par);
    const squat = await register({ hashedPan, par }, bankB);
    expect(squat.reg.status).toBe(200);
    const squatUser = squat.reg.body.data.userId as string;
    const before = tap(par);
    expect((await encrypt(before)).body.data.keyId).toBe(squat.keyId);
    const transfer = (body: unknown, token = TOKEN) =>
      fetch(`${svc.baseUrl}/admin/v1/cards/transfer`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      }).then(async (res) => ({ status: res.status, body: (await res.json()) as Envelope }));

    // Refused, and nothing moves: a wrong token, unknown fields, no such user, a tenant with no issuer key.
    expect((await transfer({ userId: squatUser, toTenant: "issuer-1" }, `${TOKEN}x`)).status).toBe(401);
    expect((await transfer({ userId: squatUser, toTenant: "issuer-1", keyId: "k" })).status).toBe(400);
    expect((await transfer({ userId: "usr_nobody", toTenant: "issuer-1" })).status).toBe(404);
    const noIssuer = await transfer({ userId: squatUser, toTenant: "no-such-bank" });
    expect(noIssuer.body.error?.details).toContain("toTenant:");
    expect((await transfer({ userId: squatUser, toTenant: "bank-b" })).status).toBe(400);
    const stillSquatted = tap(par);
    expect((await encrypt(stillSquatted)).body.data.keyId).toBe(squat.keyId);

    const moved = await transfer({ userId: squatUser, toTenant: "issuer-1" });
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);
    expect(moved.body.data).toMatchObject({
      previousUserId: squatUser,
      fromTenant: "bank-b",
      toTenant: "issuer-1",
    });
    const newUser = moved.body.data.userId as string;
    const transferId = moved.body.data.transferId as string;
    expect(transferId).toMatch(/^trf_[0-9a-f]{32}$/);
    // Again: the previous user holds no card any more.
    expect((await transfer({ userId: squatUser, toTenant: "issuer-1" })).status).toBe(404);

    // From now on the squatter's key gets nothing, by either reference: escrow for the new issuer.
    const waiting = [tap(par), byPan(hashedPan)];
    for (const r of waiting) expect((await encrypt(r)).body.data).toMatchObject({ isEscrowed: true });
    expect((await register({ par }, bankB)).reg.status).toBe(409);
    expect((await register({ hashedPan }, bankB)).reg.status).toBe(409);
    // The squatter's user keeps what it had.
    expect(await listed(squatUser, bankB)).toEqual([before.receiptId, stillSquatted.receiptId].sort());

    const claimed = await register({ hashedPan, par });
    expect(claimed.reg.status, JSON.stringify(claimed.reg.body)).toBe(200);
    expect(claimed.reg.body.data).toMatchObject({ userId: newUser, releasedReceipts: 2 });
    expect((await encrypt(tap(par))).body.data).toMatchObject({ keyId: claimed.keyId, isEscrowed: false });
    expect(await listed(newUser)).toHaveLength(3);

    const actions = async (key: string) => {
      const seen: Array<{ action: string; subject?: string }> = [];
      for (let token = "", pages = 0; pages < 50; pages++) {
        const page = await get(svc, `/api/v1/audit?pageToken=${token}`, key);
        expect(page.status, JSON.stringify(page.body)).toBe(200);
        if (page.body.data.events.length === 0) return seen;
        seen.push(...(page.body.data.events as Array<{ action: string; subject?: string }>));
        token = page.body.data.nextPageToken;
      }
      throw new Error("the audit feed never ended");
    };
    // Each issuer's audit names the transfer by the id the answer and the key log carry.
    const named = (events: Array<{ action: string; subject?: string }>, action: string) =>
      events.filter((e) => e.action === action).map((e) => e.subject?.includes(`(${transferId})`));
    expect(named(await actions(bankB), "admin.card.transferred_away")).toEqual([true]);
    expect(named(await actions(svc.issuerKey), "admin.card.transferred")).toEqual([true]);
  });

  it("never logs a reference and never stores one in the clear", () => {
    const stored = JSON.stringify(dumpableMemory(svc.store).dump());
    expect(sent.filter((value) => stored.includes(value))).toEqual([]);
    expect(logLines.length).toBeGreaterThan(50);
    for (const value of sent) expect(logLines.filter((line) => line.includes(value))).toEqual([]);
  });
});
