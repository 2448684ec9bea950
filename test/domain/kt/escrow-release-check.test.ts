import { generateKeyPairSync, randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rewrapKeyBundle } from "../../../src/client/index.js";
import {
  escrowKeyStatement,
  type IssuerSigner,
  keyBindingStatement,
  signStatement,
} from "../../../src/client/key-binding.js";
import { encryptedReceiptOf } from "../../../src/rpc/convert.js";
import type { KeyRecord } from "../../../src/store/types.js";
import { hashPan, post, receiptBody, startService, type TestService } from "../../support/harness.js";
import { operatorSteps, ownBins, registeredRoot, untilSequenced } from "../../support/kt-issuers.js";

/**
 * Server-side sealing's check on an issuer's escrow release (issue 32): for a tenant
 * with requireBindings, `POST /api/v1/escrow/release` names the card, and the service verifies the
 * user's active key against the key log (the issuer's signed binding of that card and key under the
 * latest checkpoint) before it moves anything. A key row swapped in the store makes the release
 * refuse (`integrity_failure`) with every receipt still escrowed; without the card it is `forbidden`,
 * with another card `invalid_request`; the properly bound key releases.
 */

const TOKEN = "kt-escrow-release-check-admin-token-012345";
const BIN = "53200011";
const TENANT = "release-check-bank";
let svc: TestService;
let bankKey: string;
let root: IssuerSigner;
const escrowPair = generateKeyPairSync("ec", { namedCurve: "P-256" });
const escrowPrivate = escrowPair.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64");

const admin = (method: string, path: string, body?: unknown) =>
  operatorSteps(svc.baseUrl, TOKEN)(method, path, body);

function p256(): string {
  const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return publicKey.export({ type: "spki", format: "der" }).toString("base64");
}

const sequenced = () => untilSequenced(svc);

beforeAll(async () => {
  svc = await startService({ env: { ADMIN_TOKEN: TOKEN, KT_SEQUENCER_POLL_MS: "20" } });
  bankKey = await svc.newKey({ role: "issuer", tier: "standard", tenantId: TENANT });
  await ownBins(svc, TENANT, [BIN]);
  await admin("PUT", `/admin/v1/issuers/${TENANT}/require-bindings`, { requireBindings: true });
  root = await registeredRoot(svc, admin, { id: TENANT, key: bankKey });
  const publicKey = escrowPair.publicKey.export({ type: "spki", format: "der" }).toString("base64");
  const binding = await signStatement(
    escrowKeyStatement({ issuer: TENANT, keyId: "iek_release-check-1", publicKey, version: 1 }),
    root,
  );
  const res = await post(svc, "/api/v1/issuers/escrow-keys", bankKey, { publicKey, binding });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  await sequenced();
});
afterAll(async () => {
  await svc?.close();
});

let cards = 0;
/**
 * A card with two receipts escrowed to the bank's key, then registered with its signed binding; named
 * by its hashed PAN, or by its PAR alone.
 */
async function cardWithEscrow(by: "hashedPan" | "par" = "hashedPan") {
  const hashedPan = hashPan(`${BIN}${String(++cards).padStart(8, "0")}`);
  const par = `Q1${randomUUID().replaceAll("-", "").toUpperCase().slice(0, 27)}`;
  const ref = by === "par" ? { par } : { hashedPan };
  const recipient =
    by === "par" ? { recipientHashedPan: undefined, recipientPar: par } : { recipientHashedPan: hashedPan };
  const receipts: Array<{ merchantId: string; receiptId: string }> = [];
  for (let i = 0; i < 2; i++) {
    const body = receiptBody({ ...recipient, cardBin: BIN }) as {
      merchantId: string;
      receiptId: string;
    };
    const res = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body);
    expect(res.body.data, JSON.stringify(res.body)).toMatchObject({
      isEscrowed: true,
      keyId: "iek_release-check-1",
    });
    receipts.push({ merchantId: body.merchantId, receiptId: body.receiptId });
  }
  const keyId = randomUUID();
  const publicKey = p256();
  const statement = keyBindingStatement({
    issuer: TENANT,
    card: ref,
    bin: BIN,
    keyId,
    publicKey,
    version: 1,
  });
  const binding = await signStatement(statement, root);
  const reg = await post(svc, "/api/v1/onboarding/register", bankKey, { ...ref, publicKey, keyId, binding });
  expect(reg.status, JSON.stringify(reg.body)).toBe(200);
  return { hashedPan, par, keyId, publicKey, userId: reg.body.data.userId as string, receipts };
}

/** The release request's items: each receipt's AES key re-wrapped from the bank's escrow key to `to`. */
async function items(
  receipts: Array<{ merchantId: string; receiptId: string }>,
  to: { keyId: string; publicKey: string },
) {
  const out = [];
  for (const r of receipts) {
    const record = await svc.store.receipts.findByMerchantReceipt(r.merchantId, r.receiptId);
    if (record === undefined) throw new Error("no receipt");
    const m = encryptedReceiptOf(record);
    const bundle = await rewrapKeyBundle({ ...m, keyBundle: m.keyBundle }, escrowPrivate, to);
    out.push({ ...r, keyBundle: bundle });
  }
  return out;
}

async function stillEscrowed(receipts: Array<{ merchantId: string; receiptId: string }>): Promise<void> {
  for (const r of receipts) {
    const record = await svc.store.receipts.findByMerchantReceipt(r.merchantId, r.receiptId);
    expect(record?.isEscrowed, r.receiptId).toBe(true);
    expect(record?.keyBundle.keyId).toBe("iek_release-check-1");
  }
}

describe("an issuer's escrow release is checked against the key log for requireBindings tenants", () => {
  it("releases to the properly bound key when the request names the card", async () => {
    const card = await cardWithEscrow();
    await sequenced();
    const receipts = await items(card.receipts, card);
    const res = await post(svc, "/api/v1/escrow/release", bankKey, {
      userId: card.userId,
      hashedPan: card.hashedPan,
      receipts,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.data).toMatchObject({ released: 2, failed: [] });
  });

  it("releases a card registered by its PAR alone when the request names that PAR", async () => {
    const card = await cardWithEscrow("par");
    await sequenced();
    const receipts = await items(card.receipts, card);
    const res = await post(svc, "/api/v1/escrow/release", bankKey, {
      userId: card.userId,
      par: card.par,
      receipts,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.data).toMatchObject({ released: 2, failed: [] });
  });

  it("refuses without the card, with another card, and with a swapped key row, moving nothing", async () => {
    const card = await cardWithEscrow();
    const other = await cardWithEscrow();
    await sequenced();
    const receipts = await items(card.receipts, card);
    const none = await post(svc, "/api/v1/escrow/release", bankKey, { userId: card.userId, receipts });
    expect(none.status, JSON.stringify(none.body)).toBe(403);
    expect(none.body.error?.details).toContain("hashedPan: is required");
    const wrong = await post(svc, "/api/v1/escrow/release", bankKey, {
      userId: card.userId,
      hashedPan: other.hashedPan,
      receipts,
    });
    expect(wrong.status, JSON.stringify(wrong.body)).toBe(400);
    expect(wrong.body.error?.details).toContain("hashedPan: must be the user's card");
    // A malformed reference is named for its format, never matched against the user's cards.
    const malformed = [
      [{ hashedPan: "abc" }, "hashedPan: must be 64 hexadecimal characters"],
      [{ par: "short" }, "par: must be a PAR: 29 upper-case letters and digits"],
      [
        { hashedPan: card.hashedPan, par: "V0010013018209856843587239384" },
        "par: cannot stand beside hashedPan",
      ],
    ] as const;
    for (const [ref, reason] of malformed) {
      const bad = await post(svc, "/api/v1/escrow/release", bankKey, {
        userId: card.userId,
        ...ref,
        receipts,
      });
      expect([bad.status, bad.body.error?.details], JSON.stringify(bad.body)).toEqual([
        400,
        expect.stringContaining(reason),
      ]);
    }
    await stillEscrowed(card.receipts);

    // A store writer swaps the user's active key row; the issuer, asking the service, re-wraps to it.
    const swapped = p256();
    const keys = (svc.store.users as unknown as { keys: Map<string, KeyRecord> }).keys;
    (keys.get(card.keyId) as KeyRecord).publicKey = swapped;
    const toSwapped = await items(card.receipts, { keyId: card.keyId, publicKey: swapped });
    const res = await post(svc, "/api/v1/escrow/release", bankKey, {
      userId: card.userId,
      hashedPan: card.hashedPan,
      receipts: toSwapped,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(422);
    expect(res.body.error?.code).toBe("integrity_failure");
    expect(JSON.stringify(res.body)).not.toContain(card.hashedPan);
    await stillEscrowed(card.receipts);
  });
});
