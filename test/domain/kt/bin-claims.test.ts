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
 * BIN claims from the attacker's side (the operator acting alone): before a tenant has a confirmed
 * root, the operator's `PUT .../bins` sets its BINs; after, every prefix added needs the root's
 * `receipts.v1/bin-claim` and every prefix removed its `receipts.v1/bin-release`, versions following
 * the tenant's statements. Every refusal leaves the tenant's BINs as they were.
 */

const TOKEN = "kt-bin-claims-test-admin-token-0123456789";
let svc: TestService;
let counter = 0;

beforeAll(async () => {
  svc = await startService({ env: { ADMIN_TOKEN: TOKEN, KT_SEQUENCER_POLL_MS: "20" } });
});
afterAll(async () => {
  await svc?.close();
});

const admin = (method: string, path: string, body?: unknown) =>
  operatorCalls<LooseAdminBody>(svc.baseUrl, TOKEN)(method, path, body);

/** A fresh issuer tenant with an API key, and (unless `confirm` is false) a confirmed root. */
async function bankWithRoot(confirm = true): Promise<{ id: string; key: string; root: IssuerSigner }> {
  counter += 1;
  const id = `bc-bank-${counter}`;
  const key = await svc.newKey({ role: "issuer", tier: "standard", tenantId: id });
  const root = await generateIssuerSigner("Ed25519");
  const added = await post(svc, "/api/v1/issuers/signing-keys", key, { publicKey: root.spki });
  expect(added.status, JSON.stringify(added.body)).toBe(200);
  if (confirm) {
    const path = `/admin/v1/issuers/${id}/signing-keys/${root.signingKeyId}/confirm`;
    expect((await admin("POST", path)).status).toBe(200);
  }
  return { id, key, root };
}

async function signed(
  signer: IssuerSigner,
  issuer: string,
  type: "receipts.v1/bin-claim" | "receipts.v1/bin-release",
  prefix: string,
  version: number,
) {
  const s = await signStatement(
    statementOf({
      v: 1,
      type,
      issuer,
      prefix,
      kind: "bin",
      ...(type === "receipts.v1/bin-release" ? { to: null } : {}),
      version,
      issuedAt: formatTime(Date.now()),
    }),
    signer,
  );
  return { statement: s.statement, signature: s.signature };
}

async function bins(tenant: string): Promise<string[]> {
  return (await admin("GET", `/admin/v1/issuers/${tenant}/bins`)).body.data.bins;
}

const put = (tenant: string, body: unknown) => admin("PUT", `/admin/v1/issuers/${tenant}/bins`, body);

describe("BIN claims signed by the root", () => {
  it("takes the operator's word before the root is confirmed", async () => {
    const bank = await bankWithRoot(false);
    expect((await put(bank.id, { bins: ["51000001"] })).status).toBe(200);
    expect(await bins(bank.id)).toEqual(["51000001"]);
  });

  it("refuses the operator alone once the root is confirmed, and takes the root's claims and releases", async () => {
    const bank = await bankWithRoot(false);
    expect((await put(bank.id, { bins: ["51000002"] })).status).toBe(200);
    const path = `/admin/v1/issuers/${bank.id}/signing-keys/${bank.root.signingKeyId}/confirm`;
    expect((await admin("POST", path)).status).toBe(200);

    const alone = await put(bank.id, { bins: ["51000002", "51000003"] });
    expect(alone.status).toBe(400);
    expect(alone.body.error.code).toBe("invalid_signature");
    const removeAlone = await put(bank.id, { bins: [] });
    expect(removeAlone.body.error.code).toBe("invalid_signature");
    expect(await bins(bank.id)).toEqual(["51000002"]);

    // Claims of the wrong prefix, a release for an addition, a version skipped, a signer that is not
    // the root: each refused, nothing changed.
    const wrongPrefix = await put(bank.id, {
      bins: ["51000002", "51000003"],
      statements: [await signed(bank.root, bank.id, "receipts.v1/bin-claim", "51000004", 1)],
    });
    expect(wrongPrefix.body.error.code).toBe("invalid_request");
    const wrongType = await put(bank.id, {
      bins: ["51000002", "51000003"],
      statements: [await signed(bank.root, bank.id, "receipts.v1/bin-release", "51000003", 1)],
    });
    expect(wrongType.body.error.code).toBe("invalid_request");
    const skipped = await put(bank.id, {
      bins: ["51000002", "51000003"],
      statements: [await signed(bank.root, bank.id, "receipts.v1/bin-claim", "51000003", 2)],
    });
    expect(skipped.body.error.code).toBe("invalid_request");
    const stranger = await generateIssuerSigner("Ed25519");
    const forged = await put(bank.id, {
      bins: ["51000002", "51000003"],
      statements: [await signed(stranger, bank.id, "receipts.v1/bin-claim", "51000003", 1)],
    });
    expect(forged.body.error.code).toBe("invalid_signature");
    const another = await bankWithRoot();
    const othersRoot = await put(bank.id, {
      bins: ["51000002", "51000003"],
      statements: [await signed(another.root, bank.id, "receipts.v1/bin-claim", "51000003", 1)],
    });
    expect(othersRoot.body.error.code).toBe("invalid_signature");
    expect(await bins(bank.id)).toEqual(["51000002"]);

    const claimed = await put(bank.id, {
      bins: ["51000002", "51000003"],
      statements: [await signed(bank.root, bank.id, "receipts.v1/bin-claim", "51000003", 1)],
    });
    expect(claimed.status, JSON.stringify(claimed.body)).toBe(200);
    expect(await bins(bank.id)).toEqual(["51000002", "51000003"]);

    const missing = await put(bank.id, {
      bins: ["51000005"],
      statements: [await signed(bank.root, bank.id, "receipts.v1/bin-claim", "51000005", 2)],
    });
    expect(missing.body.error.code).toBe("invalid_signature");
    expect(JSON.stringify(missing.body)).toContain("51000002");
    const swapped = await put(bank.id, {
      bins: ["51000003", "51000005"],
      statements: [
        await signed(bank.root, bank.id, "receipts.v1/bin-release", "51000002", 2),
        await signed(bank.root, bank.id, "receipts.v1/bin-claim", "51000005", 3),
      ],
    });
    expect(swapped.status, JSON.stringify(swapped.body)).toBe(200);
    expect(await bins(bank.id)).toEqual(["51000003", "51000005"]);
  });
});

describe("a BIN moving from a tenant with a confirmed root", () => {
  const clock = new FakeClock(new Date(Math.floor(Date.now() / 1000) * 1000));
  let moving: TestService;
  beforeAll(async () => {
    moving = await startService({ clock, env: { ADMIN_TOKEN: TOKEN, KT_SEQUENCER_POLL_MS: "20" } });
  });
  afterAll(async () => {
    await moving?.close();
  });

  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${moving.baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    // biome-ignore lint/suspicious/noExplicitAny: test assertions index freely into response data
    return { status: res.status, body: (await res.json()) as { data?: any; error?: any } };
  };

  async function tenant(withRoot: boolean): Promise<{ id: string; root: IssuerSigner }> {
    counter += 1;
    const id = `mv-bank-${counter}`;
    const key = await moving.newKey({ role: "issuer", tier: "standard", tenantId: id });
    const root = await generateIssuerSigner("Ed25519");
    if (withRoot) {
      const added = await post(moving, "/api/v1/issuers/signing-keys", key, { publicKey: root.spki });
      expect(added.status, JSON.stringify(added.body)).toBe(200);
      const path = `/admin/v1/issuers/${id}/signing-keys/${root.signingKeyId}/confirm`;
      expect((await call("POST", path)).status).toBe(200);
    }
    return { id, root };
  }

  /** The tenant a receipt for an unregistered card of `bin` is escrowed for, as routing decides now. */
  async function routedTo(bin: string): Promise<string | undefined> {
    const body = receiptBody({
      cardBin: bin,
      recipientHashedPan: hashPan(`${bin}${String(counter++).padStart(8, "0")}`),
    });
    const res = await post(moving, "/api/v1/receipts/encrypt", moving.merchantKey, body);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const record = await moving.store.receipts.findByMerchantReceipt(
      "merchant-001",
      body.receiptId as string,
    );
    return record?.escrowOwnerTenantId;
  }

  /** The newest snapshot's prefix entries for `prefix`, by issuer, after a round at the clock's time. */
  async function shown(prefix: string) {
    await moving.app.kt.sequencer.round();
    const head = await moving.store.ktLog.head();
    const latest = await moving.store.ktLog.directoryBefore(head.size);
    const issuers = JSON.parse(latest?.json ?? '{"issuers":[]}').issuers as Array<{
      issuer: string;
      prefixes: Array<{ prefix: string; effectiveFrom: string; effectiveUntil: string | null }>;
    }>;
    return Object.fromEntries(
      issuers.flatMap((i) => i.prefixes.filter((p) => p.prefix === prefix).map((p) => [i.issuer, p])),
    );
  }

  it("takes effect 7 days after the snapshot that announced it, unless the old owner's root releases it", async () => {
    const a = await tenant(false);
    const b = await tenant(false);
    expect((await call("PUT", `/admin/v1/issuers/${a.id}/bins`, { bins: ["53000001"] })).status).toBe(200);
    const added = await post(
      moving,
      "/api/v1/issuers/signing-keys",
      await moving.newKey({ role: "issuer", tier: "standard", tenantId: a.id }),
      { publicKey: a.root.spki },
    );
    expect(added.status).toBe(200);
    expect(
      (await call("POST", `/admin/v1/issuers/${a.id}/signing-keys/${a.root.signingKeyId}/confirm`)).status,
    ).toBe(200);

    // The operator gives a's BIN to b without a's release: announced, not in effect.
    const moved = await call("PUT", `/admin/v1/issuers/${b.id}/bins`, { bins: ["53000001"] });
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);
    expect(moved.body.data.bins).toEqual([]);
    expect(await routedTo("53000001")).toBe(a.id);
    const announced = await shown("53000001");
    const due = announced[b.id]?.effectiveFrom as string;
    expect(Date.parse(due) - clock.now().getTime()).toBeGreaterThanOrEqual(7 * 86_400_000 - 5_000);
    expect(announced[a.id]?.effectiveUntil).toBe(due);
    expect(announced[b.id]?.effectiveUntil).toBeNull();

    // A day short of it, and a minute short: still a's.
    clock.advance(6 * 86_400_000);
    expect((await shown("53000001"))[b.id]?.effectiveFrom).toBe(due);
    expect(await routedTo("53000001")).toBe(a.id);
    clock.advance(Date.parse(due) - clock.now().getTime() - 60_000);
    await shown("53000001");
    expect(await routedTo("53000001")).toBe(a.id);
    expect((await call("GET", `/admin/v1/issuers/${a.id}/bins`)).body.data.bins).toEqual(["53000001"]);

    // Due: the next round hands it over, and the snapshot keeps the time it took effect.
    clock.advance(61_000);
    const after = await shown("53000001");
    expect(after[a.id]).toBeUndefined();
    expect(after[b.id]).toEqual({
      prefix: "53000001",
      kind: "bin",
      effectiveFrom: due,
      effectiveUntil: null,
    });
    expect(await routedTo("53000001")).toBe(b.id);
    expect((await call("GET", `/admin/v1/issuers/${a.id}/bins`)).body.data.bins).toEqual([]);
    expect((await call("GET", `/admin/v1/issuers/${b.id}/bins`)).body.data.bins).toEqual(["53000001"]);
  });

  it("moves at once with the old owner's root's release, and refuses a release it did not sign", async () => {
    const a = await tenant(true);
    const b = await tenant(false);
    const claim = await signedOn(a, "receipts.v1/bin-claim", "53000002", 1, undefined);
    expect(
      (await call("PUT", `/admin/v1/issuers/${a.id}/bins`, { bins: ["53000002"], statements: [claim] }))
        .status,
    ).toBe(200);

    const stranger = await generateIssuerSigner("Ed25519");
    const forged = await call("PUT", `/admin/v1/issuers/${b.id}/bins`, {
      bins: ["53000002"],
      releases: [
        await signedOn({ id: a.id, root: stranger }, "receipts.v1/bin-release", "53000002", 2, b.id),
      ],
    });
    expect(forged.body.error?.code).toBe("invalid_signature");
    const elsewhere = await call("PUT", `/admin/v1/issuers/${b.id}/bins`, {
      bins: ["53000002"],
      releases: [await signedOn(a, "receipts.v1/bin-release", "53000002", 2, "someone-else")],
    });
    expect(elsewhere.body.error?.code).toBe("invalid_request");
    expect((await call("GET", `/admin/v1/issuers/${a.id}/bins`)).body.data.bins).toEqual(["53000002"]);

    const released = await call("PUT", `/admin/v1/issuers/${b.id}/bins`, {
      bins: ["53000002"],
      releases: [await signedOn(a, "receipts.v1/bin-release", "53000002", 2, b.id)],
    });
    expect(released.status, JSON.stringify(released.body)).toBe(200);
    expect(await routedTo("53000002")).toBe(b.id);
    expect((await call("GET", `/admin/v1/issuers/${a.id}/bins`)).body.data.bins).toEqual([]);
  });
});

async function signedOn(
  tenant: { id: string; root: IssuerSigner },
  type: "receipts.v1/bin-claim" | "receipts.v1/bin-release",
  prefix: string,
  version: number,
  to: string | undefined,
) {
  const s = await signStatement(
    statementOf({
      v: 1,
      type,
      issuer: tenant.id,
      prefix,
      kind: "bin",
      ...(type === "receipts.v1/bin-release" ? { to: to ?? null } : {}),
      version,
      issuedAt: formatTime(Date.now()),
    }),
    tenant.root,
  );
  return { statement: s.statement, signature: s.signature };
}
