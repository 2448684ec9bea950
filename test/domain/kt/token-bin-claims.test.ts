import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  generateIssuerSigner,
  type IssuerSigner,
  signStatement,
  statementOf,
} from "../../../src/client/key-binding.js";
import { FakeClock } from "../../../src/clock.js";
import { formatTime } from "../../../src/kt/statements.js";
import { hashPan, post, receiptBody, startService, type TestService } from "../../support/harness.js";
import { type LooseAdminBody, operatorCalls } from "../../support/kt-issuers.js";

/**
 * Token-BIN claims (a wallet token's first 8 digits, how a tap is routed) follow the rule of BIN
 * claims: the operator's word before a tenant has a confirmed root; after, each token BIN added needs
 * the root's `receipts.v1/bin-claim` of kind `token-bin` and each removed its `bin-release`; a token
 * BIN taken from a tenant with a confirmed root moves at once only with that root's release, else 7
 * days after the snapshot that announced it. The snapshot lists token BINs with kind `token-bin` and
 * `effectiveFrom`. Every refusal leaves the lists as they were.
 */

const TOKEN = "kt-token-bin-claims-admin-token-0123456789";
const clock = new FakeClock(new Date(Math.floor(Date.now() / 1000) * 1000));
let svc: TestService;
let counter = 0;

beforeAll(async () => {
  svc = await startService({ clock, env: { ADMIN_TOKEN: TOKEN, KT_SEQUENCER_POLL_MS: "20" } });
});
afterAll(async () => {
  await svc?.close();
});

const admin = (method: string, path: string, body?: unknown) =>
  operatorCalls<LooseAdminBody>(svc.baseUrl, TOKEN)(method, path, body);

interface Bank {
  id: string;
  key: string;
  root: IssuerSigner;
}

async function bank(): Promise<Bank> {
  counter += 1;
  const id = `tb-bank-${counter}`;
  const key = await svc.newKey({ role: "issuer", tier: "standard", tenantId: id });
  return { id, key, root: await generateIssuerSigner("Ed25519") };
}

async function confirm(b: Bank): Promise<void> {
  const added = await post(svc, "/api/v1/issuers/signing-keys", b.key, { publicKey: b.root.spki });
  expect(added.status, JSON.stringify(added.body)).toBe(200);
  const path = `/admin/v1/issuers/${b.id}/signing-keys/${b.root.signingKeyId}/confirm`;
  expect((await admin("POST", path)).status).toBe(200);
}

async function signed(
  b: { id: string; root: IssuerSigner },
  type: "receipts.v1/bin-claim" | "receipts.v1/bin-release",
  prefix: string,
  version: number,
  options: { kind?: "bin" | "token-bin"; to?: string | null } = {},
) {
  const s = await signStatement(
    statementOf({
      v: 1,
      type,
      issuer: b.id,
      prefix,
      kind: options.kind ?? "token-bin",
      ...(type === "receipts.v1/bin-release" ? { to: options.to ?? null } : {}),
      version,
      issuedAt: formatTime(clock.now().getTime()),
    }),
    b.root,
  );
  return { statement: s.statement, signature: s.signature };
}

const put = (tenant: string, body: unknown) => admin("PUT", `/admin/v1/issuers/${tenant}/bins`, body);
const lists = async (tenant: string) => {
  const { bins, tokenBins } = (await admin("GET", `/admin/v1/issuers/${tenant}/bins`)).body.data;
  return { bins, tokenBins };
};

/** The tenant a tap's receipt (the wallet token's first 8 digits as `cardBin`) is escrowed for now. */
async function routedTo(tokenBin: string): Promise<string | undefined> {
  const body = receiptBody({
    cardBin: tokenBin,
    recipientHashedPan: hashPan(`${tokenBin}${String(counter++).padStart(8, "0")}`),
  });
  const res = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  const record = await svc.store.receipts.findByMerchantReceipt("merchant-001", body.receiptId as string);
  return record?.escrowOwnerTenantId;
}

/** The newest snapshot's entries for `prefix`, by issuer, after a sequencer round at the clock's time. */
async function shown(prefix: string) {
  await svc.app.kt.sequencer.round();
  const head = await svc.store.ktLog.head();
  const latest = await svc.store.ktLog.directoryBefore(head.size);
  const issuers = JSON.parse(latest?.json ?? '{"issuers":[]}').issuers as Array<{
    issuer: string;
    prefixes: Array<{ prefix: string; kind: string; effectiveFrom: string; effectiveUntil: string | null }>;
  }>;
  return Object.fromEntries(
    issuers.flatMap((i) => i.prefixes.filter((p) => p.prefix === prefix).map((p) => [i.issuer, p])),
  );
}

describe("token-BIN claims signed by the root", () => {
  it("takes the operator's word before the root, lists and routes token BINs, then needs the root's claims", async () => {
    const b = await bank();
    expect((await put(b.id, { bins: ["58000001"], tokenBins: ["59000001"] })).status).toBe(200);
    expect(await lists(b.id)).toEqual({ bins: ["58000001"], tokenBins: ["59000001"] });
    const entry = (await shown("59000001"))[b.id];
    expect(entry).toMatchObject({ prefix: "59000001", kind: "token-bin", effectiveUntil: null });
    expect(Date.parse(entry?.effectiveFrom as string)).toBeLessThanOrEqual(clock.now().getTime());
    expect(await routedTo("59000001")).toBe(b.id);
    await confirm(b);

    const add = { bins: ["58000001"], tokenBins: ["59000001", "59000002"] };
    const alone = await put(b.id, add);
    expect(alone.body.error?.code).toBe("invalid_signature");
    // A claim of the same digits as a card BIN is no claim of the token BIN.
    const asBin = await put(b.id, {
      ...add,
      statements: [await signed(b, "receipts.v1/bin-claim", "59000002", 1, { kind: "bin" })],
    });
    expect(asBin.body.error?.code).toBe("invalid_request");
    const stranger = { id: b.id, root: await generateIssuerSigner("Ed25519") };
    const forged = await put(b.id, {
      ...add,
      statements: [await signed(stranger, "receipts.v1/bin-claim", "59000002", 1)],
    });
    expect(forged.body.error?.code).toBe("invalid_signature");
    // Removing a token BIN without the root's release, or leaving `tokenBins` out (they stay).
    expect((await put(b.id, { bins: ["58000001"], tokenBins: [] })).body.error?.code).toBe(
      "invalid_signature",
    );
    expect((await put(b.id, { bins: ["58000001"] })).status).toBe(200);
    expect(await lists(b.id)).toEqual({ bins: ["58000001"], tokenBins: ["59000001"] });

    const claim = await signed(b, "receipts.v1/bin-claim", "59000002", 1);
    const claimed = await put(b.id, { ...add, statements: [claim] });
    expect(claimed.status, JSON.stringify(claimed.body)).toBe(200);
    expect(claimed.body.data.tokenBins).toEqual(["59000001", "59000002"]);
    // The same claim again, to add it back after a release: its version is spent.
    const release = await signed(b, "receipts.v1/bin-release", "59000002", 2);
    expect(
      (await put(b.id, { bins: ["58000001"], tokenBins: ["59000001"], statements: [release] })).status,
    ).toBe(200);
    const replayed = await put(b.id, { ...add, statements: [claim] });
    expect(replayed.body.error?.code).toBe("invalid_request");
    expect(await lists(b.id)).toEqual({ bins: ["58000001"], tokenBins: ["59000001"] });
    expect((await shown("59000002"))[b.id]).toBeUndefined();
  });

  it("refuses a token BIN another tenant holds as a BIN, and the same digits as both kinds", async () => {
    const a = await bank();
    const b = await bank();
    expect((await put(a.id, { bins: ["58100001"] })).status).toBe(200);
    expect((await put(b.id, { bins: [], tokenBins: ["58100001"] })).body.error?.code).toBe("conflict");
    expect((await put(b.id, { bins: [], tokenBins: ["581000"] })).body.error?.code).toBe("conflict");
    expect((await put(a.id, { bins: ["58100001"], tokenBins: ["58100001"] })).body.error?.code).toBe(
      "conflict",
    );
    expect(await lists(a.id)).toEqual({ bins: ["58100001"], tokenBins: [] });
    expect(await lists(b.id)).toEqual({ bins: [], tokenBins: [] });
  });
});

describe("a token BIN moving from a tenant with a confirmed root", () => {
  it("takes effect 7 days after the snapshot that announced it, or at once with the owner's release", async () => {
    const a = await bank();
    const b = await bank();
    expect((await put(a.id, { bins: [], tokenBins: ["59100001", "59100002"] })).status).toBe(200);
    await confirm(a);

    // Without a's release: announced under b, a's until then.
    const moved = await put(b.id, { bins: [], tokenBins: ["59100001"] });
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);
    expect(moved.body.data.tokenBins).toEqual([]);
    const announced = await shown("59100001");
    const due = announced[b.id]?.effectiveFrom as string;
    expect(announced[b.id]?.kind).toBe("token-bin");
    expect(Date.parse(due) - clock.now().getTime()).toBeGreaterThanOrEqual(7 * 86_400_000 - 5_000);
    expect(announced[a.id]?.effectiveUntil).toBe(due);
    expect(await routedTo("59100001")).toBe(a.id);
    clock.advance(Date.parse(due) - clock.now().getTime() - 60_000);
    await shown("59100001");
    expect(await routedTo("59100001")).toBe(a.id);
    clock.advance(61_000);
    const after = await shown("59100001");
    expect(after[a.id]).toBeUndefined();
    expect(after[b.id]).toEqual({
      prefix: "59100001",
      kind: "token-bin",
      effectiveFrom: due,
      effectiveUntil: null,
    });
    expect(await routedTo("59100001")).toBe(b.id);

    // With a's release (of kind token-bin, naming b): at once. A forged one, or one of kind bin, is refused.
    const want = { bins: [], tokenBins: ["59100001", "59100002"] };
    const stranger = { id: a.id, root: await generateIssuerSigner("Ed25519") };
    const forged = await put(b.id, {
      ...want,
      releases: [await signed(stranger, "receipts.v1/bin-release", "59100002", 1, { to: b.id })],
    });
    expect(forged.body.error?.code).toBe("invalid_signature");
    const wrongKind = await put(b.id, {
      ...want,
      releases: [await signed(a, "receipts.v1/bin-release", "59100002", 1, { to: b.id, kind: "bin" })],
    });
    expect(wrongKind.body.error?.code).toBe("invalid_request");
    expect(await lists(a.id)).toEqual({ bins: [], tokenBins: ["59100002"] });
    const released = await put(b.id, {
      ...want,
      releases: [await signed(a, "receipts.v1/bin-release", "59100002", 1, { to: b.id })],
    });
    expect(released.status, JSON.stringify(released.body)).toBe(200);
    expect(released.body.data.tokenBins).toEqual(["59100001", "59100002"]);
    expect(await lists(a.id)).toEqual({ bins: [], tokenBins: [] });
    expect(await routedTo("59100002")).toBe(b.id);
  });
});
