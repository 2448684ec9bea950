import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  escrowKeyStatement,
  type IssuerSigner,
  keyBindingStatement,
  signStatement,
} from "../../../src/client/key-binding.js";
import type { KeyRecord } from "../../../src/store/types.js";
import { hashPan, post, receiptBody, type TestService } from "../../support/harness.js";
import { p256, startBoundIssuer } from "../../support/kt-bound.js";

/**
 * The window between a requireBindings card's store step and the checkpoint over its binding's leaf
 * (issue 32): server-side sealing's check answers `service_unavailable` with a Retry-After while the
 * key the store holds is exactly the one the card's sequence took and the log has not put under a
 * checkpoint yet (waiting fixes it), and `integrity_failure` when the key row says something the
 * sequence never took (waiting fixes nothing). Nothing is sealed or written either way; once the
 * sequencer runs, the same request seals.
 */

const BIN = "53000033";
let svc: TestService;
let bankKey: string;
let root: IssuerSigner;
let sequenced: () => Promise<void>;

beforeAll(async () => {
  const bound = await startBoundIssuer({
    token: "kt-seal-window-test-admin-token-0123456",
    tenant: "seal-window-bank",
    bin: BIN,
    env: { KT_LOG_WAIT_MS: "300" },
  });
  ({ svc, bankKey, root, sequenced } = bound);
});
afterAll(async () => {
  await svc?.close();
});

/** Registers a card with a signed binding while no sequencer runs: 503, the registration stored. */
async function registeredUnlogged(n: number): Promise<{ hashedPan: string; keyId: string }> {
  const hashedPan = hashPan(`${BIN}${String(n).padStart(8, "0")}`);
  const keyId = randomUUID();
  const publicKey = p256();
  const statement = keyBindingStatement({
    issuer: "seal-window-bank",
    card: { hashedPan },
    bin: BIN,
    keyId,
    publicKey,
    version: 1,
  });
  const binding = await signStatement(statement, root);
  const res = await post(svc, "/api/v1/onboarding/register", bankKey, {
    hashedPan,
    publicKey,
    keyId,
    binding,
  });
  expect(res.status, JSON.stringify(res.body)).toBe(503);
  return { hashedPan, keyId };
}

async function encrypt(hashedPan: string) {
  const body = receiptBody({ recipientHashedPan: hashedPan, cardBin: BIN }) as {
    merchantId: string;
    receiptId: string;
    transactionId: string;
  };
  const res = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body);
  return { res, body };
}

async function nothingStored(body: { merchantId: string; receiptId: string; transactionId: string }) {
  expect(await svc.store.receipts.findByMerchantReceipt(body.merchantId, body.receiptId)).toBeUndefined();
  expect(await svc.store.payments.findByTransaction(body.merchantId, body.transactionId)).toBeUndefined();
}

describe("server-side sealing between a binding's store step and its checkpoint", () => {
  it("answers a retryable 503 for a bound key not yet under a checkpoint, 422 for a swapped one, then seals", async () => {
    await svc.app.kt.sequencer.stop();
    const waiting = await registeredUnlogged(1);
    const swapped = await registeredUnlogged(2);
    const keys = (svc.store.users as unknown as { keys: Map<string, KeyRecord> }).keys;
    (keys.get(swapped.keyId) as KeyRecord).publicKey = p256();

    const early = await encrypt(waiting.hashedPan);
    expect(early.res.status, JSON.stringify(early.res.body)).toBe(503);
    expect(early.res.body.error?.code).toBe("service_unavailable");
    expect(early.res.body.error?.message).toContain("not put its binding under a checkpoint yet");
    expect(Number(early.res.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(JSON.stringify(early.res.body)).not.toContain(waiting.hashedPan);
    await nothingStored(early.body);
    const pay = receiptBody({ recipientHashedPan: waiting.hashedPan, cardBin: BIN, amount: 950 });
    const created = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, pay);
    expect(created.status, JSON.stringify(created.body)).toBe(503);
    await nothingStored(pay as never);

    // The swapped row matches nothing the card's sequence took: waiting would not fix it.
    const bad = await encrypt(swapped.hashedPan);
    expect(bad.res.status, JSON.stringify(bad.res.body)).toBe(422);
    expect(bad.res.body.error?.code).toBe("integrity_failure");
    await nothingStored(bad.body);

    svc.app.kt.sequencer.start();
    await sequenced();
    const late = await encrypt(waiting.hashedPan);
    expect(late.res.status, JSON.stringify(late.res.body)).toBe(200);
    expect(late.res.body.data.keyId).toBe(waiting.keyId);
    expect((await encrypt(swapped.hashedPan)).res.body.error?.code).toBe("integrity_failure");
  });

  it("answers 503 for escrow to an issuer escrow key whose statement is queued, then seals to it", async () => {
    await svc.app.kt.sequencer.stop();
    const publicKey = p256();
    const binding = await signStatement(
      escrowKeyStatement({ issuer: "seal-window-bank", keyId: "iek_seal-window-1", publicKey, version: 1 }),
      root,
    );
    const res = await post(svc, "/api/v1/issuers/escrow-keys", bankKey, { publicKey, binding });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const unregistered = hashPan(`${BIN}99999999`);
    const early = await encrypt(unregistered);
    expect(early.res.status, JSON.stringify(early.res.body)).toBe(503);
    expect(early.res.body.error?.code).toBe("service_unavailable");
    await nothingStored(early.body);
    svc.app.kt.sequencer.start();
    await sequenced();
    const late = await encrypt(unregistered);
    expect(late.res.status, JSON.stringify(late.res.body)).toBe(200);
    expect(late.res.body.data.keyId).toBe("iek_seal-window-1");
  });
});
