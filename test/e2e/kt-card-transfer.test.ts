import { createHash, generateKeyPairSync, randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EXIT, runCli } from "../../src/cli/main.js";
import {
  createKeyTrust,
  type IssuerSigner,
  type KeyTrust,
  keyBindingStatement,
  signStatement,
} from "../../src/client/index.js";
import { parKeyOf } from "../../src/domain/pan.js";
import { fromBase64Strict } from "../../src/kt/bytes.js";
import { parseLeaf } from "../../src/kt/leaves.js";
import type { TrustPolicy } from "../../src/kt/policy.js";
import { parseTransferEntry } from "../../src/kt/transfer.js";
import type { Store } from "../../src/store/types.js";
import { post, receiptBody, type TestService } from "../support/harness.js";
import { PEPPER } from "../support/kt.js";
import { startWitnessedService, type WitnessedService } from "../support/kt-witnessed.js";

/**
 * The operator's card transfer in the key log (issue 33; docs/key-transparency.md, "The card transfer
 * in the log"): `POST /admin/v1/cards/transfer` writes, in the move's store step, one `0x03` transfer
 * entry per card reference, naming the issuers from and to and a commitment to the keyed card (never
 * the card reference); the entry is a step of the card's statements that retires the old issuer's
 * key. The losing issuer's monitor reports it in one alert line; the winning issuer's next binding
 * (version the last + 1, superseding nothing) verifies for merchants; a replayed transfer logs nothing.
 */

const TOKEN = "kt-card-transfer-admin-token-0123456789";
const TO = "bank-to";
const TO_BIN = "411111";
/** issuer-1's token BIN, where its PAR card is registered before the operator moves the card. */
const FROM_BIN = "49999901";
const DAY = 86_400_000;

function capture(): Writable & { text: () => string } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      chunks.push(String(chunk));
      done();
    },
  });
  return Object.assign(stream, { text: () => chunks.join("") });
}

function deviceKey(): { keyId: string; publicKey: string } {
  const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return {
    keyId: randomUUID(),
    publicKey: publicKey.export({ type: "spki", format: "der" }).toString("base64"),
  };
}

describe("the card transfer writes a key-log entry", { timeout: 180_000 }, () => {
  let kt: WitnessedService;
  let svc: TestService;
  let store: Store;
  let dir: string;
  let policy: TrustPolicy;
  let trust: KeyTrust;
  let fromRoot: IssuerSigner;
  let toRoot: IssuerSigner;
  let toKey: string;
  const admin = (method: string, path: string, body?: unknown) => kt.admin(method, path, body);
  const witnessed = () => kt.witnessed();

  beforeAll(async () => {
    kt = await startWitnessedService({ token: TOKEN, name: "kt-card-transfer" });
    ({ svc, store, dir, policy } = kt);
    trust = createKeyTrust({ policy, baseUrl: svc.baseUrl });
    toKey = await svc.newKey({ role: "issuer", tier: "standard", tenantId: TO });
    await kt.ownBins(TO, [TO_BIN]);
    await kt.ownBins("issuer-1", [FROM_BIN]);
    fromRoot = await kt.confirmedRoot("issuer-1", svc.issuerKey);
    toRoot = await kt.confirmedRoot(TO, toKey);
  });
  afterAll(async () => {
    await kt?.close();
  });

  /** A PAR card registered by issuer-1 with its signed binding (in issuer-1's token BIN, as a PAR binding must be). */
  async function registeredByFrom() {
    const par = `T7${randomUUID().replaceAll("-", "").toUpperCase().slice(0, 27)}`;
    const device = deviceKey();
    const statement = keyBindingStatement({
      issuer: "issuer-1",
      card: { par },
      bin: FROM_BIN,
      ...device,
      version: 1,
      notBefore: Date.now() - DAY,
    });
    const binding = await signStatement(statement, fromRoot);
    const res = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, { par, ...device, binding });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return { par, device, statement, userId: res.body.data.userId as string };
  }

  /** The losing issuer's monitor command, one run. */
  async function monitorOf(files: { policy: string; records: string; state: string }) {
    const out = capture();
    const err = capture();
    const args = ["kt", "monitor", "--url", svc.baseUrl, "--issuer-key", svc.issuerKey];
    const code = await runCli(
      [...args, "--policy", files.policy, "--records", files.records, "--state", files.state],
      out,
      err,
    );
    return { code, out: out.text(), err: err.text() };
  }

  it("logs the transfer, the losing issuer's monitor reports it once, the winner's binding verifies", async () => {
    const card = await registeredByFrom();
    const files = {
      policy: join(dir, "policy.json"),
      records: join(dir, "records.json"),
      state: join(dir, "monitor.state"),
    };
    writeFileSync(files.policy, JSON.stringify(policy));
    writeFileSync(
      files.records,
      JSON.stringify({
        issuer: "issuer-1",
        signingKeys: [fromRoot.spki],
        prefixes: [],
        cards: [{ cardRef: card.par, userId: card.userId }],
        signed: [createHash("sha256").update(card.statement).digest("hex")],
      }),
    );
    await witnessed();
    const before = await monitorOf(files);
    expect(before.code, before.out + before.err).toBe(EXIT.ok);

    const moved = await admin("POST", "/admin/v1/cards/transfer", { userId: card.userId, toTenant: TO });
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);
    const transferId = moved.body.data?.transferId;
    expect(transferId).toMatch(/^trf_[0-9a-f]{32}$/);
    const sequence = `card:${parKeyOf(PEPPER, card.par)}`;
    await witnessed();
    const leaf = await store.ktLog.lastOfSequence(sequence);
    expect(leaf).toMatchObject({ kind: "transfer", version: 2 });
    const parsed = parseLeaf(leaf?.leaf ?? new Uint8Array());
    expect(parsed?.kind).toBe("directory");
    const entry = parsed?.kind === "directory" ? parseTransferEntry(parsed.json) : undefined;
    // The answer's id is the entry's, so the issuer matches the monitor's alert to the answer.
    expect(entry).toMatchObject({
      ok: true,
      value: { from: "issuer-1", to: TO, version: 2, transfer: transferId },
    });
    // The entry names the card only by a commitment: neither the PAR nor its keyed reference.
    const text = Buffer.from(leaf?.leaf ?? []).toString("utf8");
    expect(text).not.toContain(card.par);
    expect(text).not.toContain(parKeyOf(PEPPER, card.par));

    const after = await monitorOf(files);
    expect(after.code, after.err).toBe(3);
    const lines = after.out.trim().split("\n");
    expect(lines, after.out).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^alert: leaf \d+: the operator transferred one of your cards to bank-to \(trf_/,
    );
    expect(lines[0]).toContain(`(${transferId},`);

    // The winner's binding: the card's statements count on (a first version is refused, naming the
    // next), the old key is retired, so it supersedes nothing; a merchant routing by PAR verifies it.
    const device = deviceKey();
    const bind = (version: number) =>
      signStatement(
        keyBindingStatement({ issuer: TO, card: { par: card.par }, bin: TO_BIN, ...device, version }),
        toRoot,
      );
    const early = await post(svc, "/api/v1/onboarding/register", toKey, {
      par: card.par,
      cardBin: TO_BIN,
      ...device,
      binding: await bind(1),
    });
    expect(early.body.error?.code).toBe("invalid_request");
    expect(JSON.stringify(early.body)).toContain("version must be 3");
    const registered = await post(svc, "/api/v1/onboarding/register", toKey, {
      par: card.par,
      cardBin: TO_BIN,
      ...device,
      binding: await bind(3),
    });
    expect(registered.status, JSON.stringify(registered.body)).toBe(200);
    expect(registered.body.data.userId).toBe(moved.body.data?.userId);
    const lookup = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
      recipientPar: card.par,
      cardBin: TO_BIN,
    });
    expect(lookup.body.data.keyId).toBe(device.keyId);
    const verified = await trust.verify(lookup.body.data, { par: card.par, bin: TO_BIN });
    expect(verified).toMatchObject({ keyId: device.keyId, issuer: TO, version: 3 });
  });

  it("a replayed transfer is not_found and logs nothing; a transfer back is one more entry", async () => {
    const card = await registeredByFrom();
    const first = await admin("POST", "/admin/v1/cards/transfer", { userId: card.userId, toTenant: TO });
    expect(first.status).toBe(200);
    // Until the new issuer registers the card, a receipt for it (no cardBin) is escrowed for that
    // issuer, not left unowned under the service key.
    const receipt = receiptBody({ recipientHashedPan: undefined, recipientPar: card.par });
    const sealed = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, receipt);
    expect(sealed.body.data, JSON.stringify(sealed.body)).toMatchObject({ isEscrowed: true });
    const held = await store.receipts.findByMerchantReceipt(
      String(receipt.merchantId),
      String(receipt.receiptId),
    );
    expect(held?.escrowOwnerTenantId).toBe(TO);
    await witnessed();
    const head = await store.ktLog.head();
    const replay = await admin("POST", "/admin/v1/cards/transfer", { userId: card.userId, toTenant: TO });
    expect(replay.body.error?.code).toBe("not_found");
    expect(await store.ktLog.pending(10)).toEqual([]);
    expect((await store.ktLog.head()).size).toBe(head.size);
    // Back to issuer-1 from the reserved user: a second transfer of the card is a second entry.
    const back = await admin("POST", "/admin/v1/cards/transfer", {
      userId: first.body.data?.userId,
      toTenant: "issuer-1",
    });
    expect(back.status, JSON.stringify(back.body)).toBe(200);
    await witnessed();
    const leaf = await store.ktLog.lastOfSequence(`card:${parKeyOf(PEPPER, card.par)}`);
    expect(leaf).toMatchObject({ kind: "transfer", version: 3 });
    const entries = await fetch(
      `${svc.baseUrl}/kt/v1/entries?start=${head.size}&end=${(await store.ktLog.head()).size}`,
      {
        headers: { "x-api-key": svc.issuerKey },
      },
    );
    const body = (await entries.json()) as { data: { entries: Array<{ leaf: string }> } };
    const transfers = body.data.entries
      .map((e) => parseLeaf(fromBase64Strict(e.leaf) ?? new Uint8Array()))
      .flatMap((l) => (l?.kind === "directory" ? [parseTransferEntry(l.json)] : []))
      .filter((t) => t !== undefined);
    expect(transfers).toHaveLength(1);
    expect(transfers[0]).toMatchObject({ ok: true, value: { from: TO, to: "issuer-1" } });
  });
});
