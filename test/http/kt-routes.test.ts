import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fromBase64Strict } from "../../src/kt/bytes.js";
import { leafHash, verifyConsistency, verifyInclusion } from "../../src/kt/merkle.js";
import { checkNoteSignature, parseCheckpoint, parseNote, parseVkey } from "../../src/kt/note.js";
import { makeIssuer } from "../kt/world.js";
import { minuteStartClock } from "../support/clock.js";
import { type Envelope, startService, type TestService } from "../support/harness.js";
import { pendingOf, signedBinding, TestSigningKeys, testCard, userKey } from "../support/kt.js";

const ADMIN_TOKEN = "kt-routes-admin-token-0123456789abcdef";
const b64 = (text: string) => fromBase64Strict(text) as Uint8Array;

describe("the key log's public reads (/kt/v1)", () => {
  let svc: TestService;
  const keys = new TestSigningKeys();
  const bank = makeIssuer("issuer-1");
  keys.add(bank);

  async function get(path: string, headers: Record<string, string> = {}) {
    const res = await fetch(`${svc.baseUrl}${path}`, { headers });
    const type = res.headers.get("content-type") ?? "";
    const body = type.startsWith("application/json")
      ? ((await res.json()) as Envelope)
      : await res.arrayBuffer();
    return { status: res.status, headers: res.headers, body };
  }

  beforeAll(async () => {
    svc = await startService({
      env: { ADMIN_TOKEN, KT_SEQUENCER_POLL_MS: "20", KT_READS_PER_MINUTE: "1000" },
      kt: { signingKeys: keys },
    });
    // Five statements, each waited for: the tree holds the first snapshot and them.
    for (let i = 0; i < 5; i++) {
      const card = testCard();
      const pending = pendingOf(
        { log: svc.app.domain.kt } as never,
        bank,
        card,
        signedBinding(bank, card, userKey()),
      );
      expect(await svc.store.ktLog.enqueue([pending])).toEqual({ kind: "enqueued" });
      svc.app.domain.kt.notify();
      await svc.app.domain.kt.waitForLeaf(pending.id);
    }
  });
  afterAll(() => svc.close());

  it("serves the newest checkpoint, signed by the log, as text", async () => {
    const res = await fetch(`${svc.baseUrl}/kt/v1/checkpoint`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/plain; charset=utf-8");
    expect(res.headers.get("x-ratelimit-limit")).toBe("1000");
    const note = parseNote(await res.text());
    const key = parseVkey(svc.app.domain.kt.vkey);
    expect(note && key && checkNoteSignature(note, key).status).toBe("good");
    expect(parseCheckpoint(note?.text ?? "")?.size).toBeGreaterThanOrEqual(6);
  });

  it("proves consistency between the sizes it signed, and inclusion of each leaf", async () => {
    const latest = await svc.store.ktLog.latestCheckpoint();
    const size = latest?.size as number;
    const earlier = await svc.store.ktLog.checkpointAt(2);
    const consistency = await get(`/kt/v1/proof/consistency?from=2&to=${size}`);
    expect(consistency.status).toBe(200);
    const proof = ((consistency.body as Envelope).data.proof as string[]).map(b64);
    expect(verifyConsistency(2, size, earlier?.root as Uint8Array, latest?.root as Uint8Array, proof)).toBe(
      true,
    );
    for (const index of [0, 3, size - 1]) {
      const leaf = await svc.store.ktLog.leaf(index);
      const res = await get(`/kt/v1/proof/inclusion?index=${index}&size=${size}`);
      const path = ((res.body as Envelope).data.inclusion as string[]).map(b64);
      const bytes = leaf?.leaf ?? (await svc.store.ktLog.directory(leaf?.directorySha256 as string))?.json;
      const hash =
        typeof bytes === "string"
          ? leafHash(new Uint8Array([3, ...new TextEncoder().encode(bytes)]))
          : leafHash(bytes as Uint8Array);
      expect(verifyInclusion(index, size, hash, path, latest?.root as Uint8Array)).toBe(true);
    }
  });

  it("serves tiles in the C2SP layout, partial and by prefix, cacheable for good", async () => {
    const size = (await svc.store.ktLog.latestCheckpoint())?.size as number;
    const res = await get(`/kt/v1/tile/0/000.p/${size}`);
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    const bytes = new Uint8Array(res.body as ArrayBuffer);
    expect(bytes).toHaveLength(32 * size);
    const first = await svc.store.ktLog.leaf(1);
    expect(bytes.subarray(32, 64)).toEqual(leafHash(first?.leaf as Uint8Array));
    expect(new Uint8Array((await get("/kt/v1/tile/0/000.p/2")).body as ArrayBuffer)).toEqual(
      bytes.subarray(0, 64),
    );
    expect((await get(`/kt/v1/tile/0/000.p/${size + 1}`)).status).toBe(404);
    expect((await get("/kt/v1/tile/0/000")).status).toBe(404);
    expect((await get("/kt/v1/tile/1/000.p/1")).status).toBe(404);
    for (const bad of ["0/0", "0/x000/000", "0/000.p/0", "0/000.p/256", "64/000", "0/data/000", "a/000"]) {
      const answer = await get(`/kt/v1/tile/${bad}`);
      expect(answer.status, bad).toBe(400);
      expect((answer.body as Envelope).error?.code).toBe("invalid_request");
    }
  });

  it("serves a directory snapshot by its SHA-256, exactly as it was appended", async () => {
    const answer = await svc.app.domain.kt.proofs();
    const res = await fetch(`${svc.baseUrl}/kt/v1/directory/${answer.directory.sha256}`);
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    expect(await res.text()).toBe((await svc.store.ktLog.directory(answer.directory.sha256))?.json);
    expect((await get(`/kt/v1/directory/${"0".repeat(64)}`)).status).toBe(404);
    expect((await get(`/kt/v1/directory/${"A".repeat(64)}`)).status).toBe(400);
  });

  it("answers bad parameters 400 in the envelope, never 500", async () => {
    const cases = [
      "/kt/v1/proof/consistency",
      "/kt/v1/proof/consistency?from=abc&to=3",
      "/kt/v1/proof/consistency?from=0&to=3",
      "/kt/v1/proof/consistency?from=4&to=3",
      "/kt/v1/proof/consistency?from=1&to=99999",
      "/kt/v1/proof/consistency?from=1&to=9007199254740993",
      "/kt/v1/proof/consistency?from=-1&to=3",
      "/kt/v1/proof/consistency?from=01&to=3",
      "/kt/v1/proof/consistency?from=1&from=2&to=3",
      "/kt/v1/proof/inclusion?index=3&size=3",
      "/kt/v1/proof/inclusion?index=0&size=99999",
      "/kt/v1/proof/inclusion?index=1e3&size=5",
    ];
    for (const path of cases) {
      const res = await get(path);
      expect(res.status, path).toBe(400);
      expect((res.body as Envelope).error?.code, path).toBe("invalid_request");
    }
  });

  it("gives leaf data to issuer keys and registered auditors only, and audits each read", async () => {
    expect((await get("/kt/v1/entries?start=0&end=2")).status).toBe(401);
    expect((await get("/kt/v1/entries?start=0&end=2", { "x-api-key": svc.merchantKey })).status).toBe(403);
    expect((await get("/kt/v1/entries?start=0&end=2", { authorization: "Bearer kta_guess" })).status).toBe(
      401,
    );
    const issuer = await get("/kt/v1/entries?start=0&end=2", { "x-api-key": svc.issuerKey });
    expect(issuer.status).toBe(200);
    const entries = (issuer.body as Envelope).data.entries as Array<{ index: number; leaf: string }>;
    expect(entries.map((e) => e.index)).toEqual([0, 1]);
    expect(b64(entries[1]?.leaf as string)).toEqual((await svc.store.ktLog.leaf(1))?.leaf);

    const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" };
    const created = await fetch(`${svc.baseUrl}/admin/v1/kt/auditors`, {
      method: "POST",
      headers: admin,
      body: JSON.stringify({ name: "Regulator" }),
    }).then((r) => r.json() as Promise<Envelope>);
    const token = created.data.token as string;
    const auditor = await get("/kt/v1/entries?start=1&end=3", { authorization: `Bearer ${token}` });
    expect(auditor.status).toBe(200);
    await fetch(`${svc.baseUrl}/admin/v1/kt/auditors/${created.data.auditorId}`, {
      method: "DELETE",
      headers: admin,
    });
    expect((await get("/kt/v1/entries?start=1&end=3", { authorization: `Bearer ${token}` })).status).toBe(
      401,
    );

    const reads = (await svc.store.audit.list(50)).filter((e) => e.action === "kt.entries.read");
    expect(reads.map((e) => [e.tenantId, e.subject])).toEqual([
      [`auditor:${created.data.auditorId}`, "1-3"],
      ["issuer-1", "0-2"],
    ]);
    for (const path of ["start=2&end=2", "start=0&end=99999", "start=0", "start=x&end=1"]) {
      expect((await get(`/kt/v1/entries?${path}`, { "x-api-key": svc.issuerKey })).status, path).toBe(400);
    }
  });
});

describe("the key log's reads, rate limited per address", () => {
  it("answers 429 with Retry-After past KT_READS_PER_MINUTE", async () => {
    const svc = await startService({
      clock: minuteStartClock(),
      env: { KT_READS_PER_MINUTE: "3", KT_SEQUENCER_POLL_MS: "20" },
    });
    try {
      const statuses = [];
      for (let i = 0; i < 4; i++)
        statuses.push((await fetch(`${svc.baseUrl}/kt/v1/proof/consistency?from=1&to=1`)).status);
      expect(statuses.slice(0, 3).every((s) => s !== 429)).toBe(true);
      const res = await fetch(`${svc.baseUrl}/kt/v1/checkpoint`);
      expect(res.status).toBe(429);
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
      expect(((await res.json()) as Envelope).error?.code).toBe("rate_limit_exceeded");
    } finally {
      await svc.close();
    }
  });
});
