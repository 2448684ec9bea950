import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fromUtf8 } from "../../../src/kt/bytes.js";
import { commitmentOf, parseLeaf } from "../../../src/kt/leaves.js";
import { withCardRef } from "../../../src/kt/statements.js";
import { makeIssuer } from "../../kt/world.js";
import { type Envelope, get, startService, type TestService } from "../../support/harness.js";
import { PEPPER, pendingOf, signedBinding, TestSigningKeys, testCard, userKey } from "../../support/kt.js";

/**
 * The issuer's feed (docs/key-transparency.md, `GET /api/v1/kt/entries`): the caller's own leaves, opened, in
 * log order and in pages that skip nothing; never another tenant's; issuer keys only. Each entry's
 * statement, with the issuer's own card reference put back, and its opening rebuild the leaf's
 * commitment, which is what the issuer's monitor checks.
 */
describe("the issuer's feed of its own key-log leaves", () => {
  let svc: TestService;
  const keys = new TestSigningKeys();
  const bank = makeIssuer("issuer-1");
  const other = makeIssuer("issuer-2");
  keys.add(bank);
  keys.add(other);
  const own: Array<{ index: number; hashedPan: string }> = [];

  beforeAll(async () => {
    svc = await startService({
      env: { HASHED_PAN_PEPPER: PEPPER, KT_SEQUENCER_POLL_MS: "20" },
      kt: { signingKeys: keys },
    });
    for (let i = 0; i < 7; i++) {
      const issuer = i % 3 === 2 ? other : bank;
      const card = testCard();
      const pending = pendingOf(
        { log: svc.app.domain.kt } as never,
        issuer,
        card,
        signedBinding(issuer, card, userKey()),
      );
      await svc.store.ktLog.enqueue([pending]);
      svc.app.domain.kt.notify();
      const { proof } = await svc.app.domain.kt.waitForLeaf(pending.id);
      if (issuer === bank) own.push({ index: proof.leafIndex, hashedPan: card.hashedPan });
    }
  });
  afterAll(() => svc.close());

  async function page(query: string) {
    const res = await get(svc, `/api/v1/kt/entries${query}`, svc.issuerKey);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.data as { entries: Array<Record<string, unknown>>; nextPageToken: string };
  }

  it("opens each of the caller's leaves, and only those, in pages that skip nothing", async () => {
    const seen: Array<Record<string, unknown>> = [];
    let token = "";
    let pages = 0;
    do {
      const data = await page(`?pageSize=2${token === "" ? "" : `&pageToken=${token}`}`);
      seen.push(...data.entries);
      token = data.nextPageToken;
      pages++;
    } while (token !== "" && pages < 10);
    expect(seen.map((e) => Number(e.index))).toEqual(own.map((o) => o.index));
    expect(pages).toBe(Math.floor(own.length / 2) + 1);
    for (const [i, entry] of seen.entries()) {
      expect(entry).toMatchObject({ signingKeyId: bank.signingKeyId, erased: false });
      const text = fromUtf8(Buffer.from(entry.statementWithoutCardRef as string, "base64")) as string;
      expect(text).not.toContain(own[i]?.hashedPan);
      const statement = withCardRef(text, own[i]?.hashedPan as string);
      const leaf = parseLeaf((await svc.store.ktLog.leaf(Number(entry.index)))?.leaf as Uint8Array);
      const opening = new Uint8Array(Buffer.from(entry.opening as string, "base64"));
      expect(leaf?.kind === "statement" && commitmentOf(opening, statement)).toEqual(
        leaf?.kind === "statement" ? leaf.commitment : "a statement leaf",
      );
    }
    // `after` starts past a leaf index.
    const after = await page(`?after=${own[2]?.index}`);
    expect(after.entries.map((e) => Number(e.index))).toEqual(own.slice(3).map((o) => o.index));
    expect(after.nextPageToken).toBe("");
  });

  it("shows another tenant nothing of the caller's, and refuses merchants and bad parameters", async () => {
    const stranger = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "issuer-3" });
    const res = await get(svc, "/api/v1/kt/entries", stranger);
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ entries: [], nextPageToken: "" });
    expect((await get(svc, "/api/v1/kt/entries", svc.merchantKey)).status).toBe(403);
    for (const query of [
      "pageToken=ktf_-1",
      "pageToken=abc",
      "pageSize=1001",
      "pageSize=-1",
      "after=-1",
      "after=x",
    ]) {
      const bad = await get(svc, `/api/v1/kt/entries?${query}`, svc.issuerKey);
      expect(bad.status, query).toBe(400);
      expect((bad.body as Envelope).error?.code, query).toBe("invalid_request");
    }
  });
});
