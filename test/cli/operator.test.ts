import { randomBytes } from "node:crypto";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { EXIT, runCli } from "../../src/cli/main.js";
import { generateIssuerSigner, signStatement, statementOf } from "../../src/client/key-binding.js";
import { formatTime } from "../../src/kt/statements.js";
import { pendingKey } from "../store/fixtures.js";
import { hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";

/**
 * The operator commands of the command line against a running server's operator API
 * (`--url` with ADMIN_TOKEN in the environment): what the README promises a newcomer, giving a running
 * embedded-store server a second issuer and a second merchant.
 */

/** A stream that keeps what is written to it. */
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

const TOKEN = `adm_${randomBytes(24).toString("base64url")}`;

/** Runs the command line with `args`; returns exit code, stdout and stderr. */
async function cli(args: string[]) {
  const out = capture();
  const err = capture();
  const code = await runCli(args, out, err);
  return { code, out: out.text(), err: err.text() };
}

describe("operator commands against a running server (--url)", () => {
  let svc: TestService;
  const saved = process.env.ADMIN_TOKEN;

  beforeAll(async () => {
    svc = await startService({ env: { ADMIN_TOKEN: TOKEN } });
  });
  afterEach(() => {
    if (saved === undefined) delete process.env.ADMIN_TOKEN;
    else process.env.ADMIN_TOKEN = saved;
  });
  afterAll(async () => {
    await svc.close();
  });

  it("creates keys, sets BINs, assigns a merchantId, and reads the audit and escrow", async () => {
    process.env.ADMIN_TOKEN = TOKEN;
    const issuer = await cli([
      "keys",
      "create",
      "--role",
      "issuer",
      "--tenant",
      "bank-c",
      "--url",
      svc.baseUrl,
    ]);
    expect(issuer.err).toBe("");
    expect(issuer.code).toBe(EXIT.ok);
    const issuerKey = /API key \(shown once, store it now\): (rk_dev_\S+)/.exec(issuer.out)?.[1] ?? "";
    expect(issuerKey).not.toBe("");
    const merchant = await cli([
      "keys",
      "create",
      "--role",
      "merchant",
      "--tenant",
      "shop-c",
      "--tier",
      "sandbox",
      "--url",
      svc.baseUrl,
    ]);
    expect(merchant.code).toBe(EXIT.ok);
    const merchantKey = /API key \(shown once, store it now\): (rk_dev_\S+)/.exec(merchant.out)?.[1] ?? "";
    // The keys work on the running server at once.
    expect((await post(svc, "/api/v1/onboarding/generate-keys", issuerKey, {})).status).toBe(200);

    const bins = await cli(["bins", "set", "bank-c", "655555,66666666", "--url", svc.baseUrl]);
    expect(bins.err).toBe("");
    expect(bins.code).toBe(EXIT.ok);
    expect(bins.out).toContain("Tenant bank-c owns 655555, 66666666.");
    expect(await svc.store.bins.list("bank-c")).toEqual(["655555", "66666666"]);
    const shown = await cli(["bins", "get", "bank-c", "--url", svc.baseUrl]);
    expect(shown.out).toBe("655555\n66666666\n");
    // Another tenant's prefix is refused with the server's message, exit 1, nothing changed.
    const taken = await cli(["bins", "set", "issuer-1", "65555512", "--url", svc.baseUrl]);
    expect(taken.code).toBe(EXIT.failure);
    expect(taken.err).toMatch(/65555512.*belongs to another tenant/);
    expect(await svc.store.bins.list("issuer-1")).toEqual([]);
    const malformed = await cli(["bins", "set", "issuer-1", "12ab", "--url", svc.baseUrl]);
    expect(malformed.code).toBe(EXIT.failure);
    expect(malformed.err).toContain("bins[0]");

    const assign = await cli([
      "merchants",
      "assign",
      "shop-c-store",
      "--tenant",
      "shop-c",
      "--url",
      svc.baseUrl,
    ]);
    expect(assign.err).toBe("");
    expect(assign.code).toBe(EXIT.ok);
    expect(assign.out).toContain("merchantId shop-c-store belongs to tenant shop-c.");
    expect(await svc.store.merchants.find("shop-c-store")).toMatchObject({
      tenantId: "shop-c",
      source: "operator",
    });
    // The assigned tenant uses it; the harness's merchant tenant may not.
    const card = {
      merchantId: "shop-c-store",
      recipientHashedPan: hashPan("6555550000000001"),
      cardBin: "655555",
    };
    const mine = await post(svc, "/api/v1/receipts/encrypt", merchantKey, receiptBody(card));
    expect(mine.status, JSON.stringify(mine.body)).toBe(200);
    expect(mine.body.data.isEscrowed).toBe(true);
    expect((await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, receiptBody(card))).status).toBe(
      403,
    );

    const audit = await cli(["audit", "--tenant", "bank-c", "--json", "--url", svc.baseUrl]);
    expect(audit.code).toBe(EXIT.ok);
    const events = JSON.parse(audit.out) as Array<{ action: string; tenantId: string }>;
    expect(events.map((e) => e.action)).toEqual(
      expect.arrayContaining(["admin.bins.set", "admin.api_key.created"]),
    );
    expect(events.every((e) => e.tenantId === "bank-c")).toBe(true);
    const text = await cli(["audit", "--tenant", "bank-c", "--limit", "1", "--url", svc.baseUrl]);
    expect(text.out.trim().split("\n")).toHaveLength(1);
    expect(audit.out).not.toContain(issuerKey);
    const badAfter = await cli(["audit", "--after", "last week", "--url", svc.baseUrl]);
    expect(badAfter.code).toBe(EXIT.failure);
    expect(badAfter.err).toContain("after");

    const escrow = await cli(["escrow", "--json", "--url", svc.baseUrl]);
    expect(escrow.code).toBe(EXIT.ok);
    const counts = JSON.parse(escrow.out) as Array<{ ownerTenantId?: string; count: number }>;
    expect(counts.find((c) => c.ownerTenantId === "bank-c")?.count).toBe(1);
    const table = await cli(["escrow", "--url", svc.baseUrl]);
    expect(table.out).toMatch(/^bank-c\tesc_[0-9a-f]{16}\t1$/m);

    const listed = await cli(["keys", "list", "--tenant", "shop-c", "--json", "--url", svc.baseUrl]);
    const [view] = JSON.parse(listed.out) as Array<{ apiKeyId: string; tier: string }>;
    expect(view?.tier).toBe("sandbox");
    expect(listed.out).not.toContain(merchantKey);
    const revoked = await cli(["keys", "revoke", view?.apiKeyId ?? "", "--url", svc.baseUrl]);
    expect(revoked.code).toBe(EXIT.ok);
    expect((await post(svc, "/api/v1/receipts/encrypt", merchantKey, receiptBody(card))).status).toBe(401);
  });

  it("moves a card to another issuer tenant with cards transfer, refusing what the API refuses", async () => {
    process.env.ADMIN_TOKEN = TOKEN;
    const made = await cli([
      "keys",
      "create",
      "--role",
      "issuer",
      "--tenant",
      "bank-t",
      "--url",
      svc.baseUrl,
    ]);
    expect(made.code).toBe(EXIT.ok);
    const hashedPan = hashPan("4111110000000042");
    const registered = await svc.store.users.register({
      panHash: hashedPan,
      tenantId: "issuer-1",
      newUserId: `usr_cli${randomBytes(6).toString("hex")}`,
      key: pendingKey({ tenantId: "issuer-1" }),
      now: new Date(),
    });
    if (!("user" in registered)) throw new Error(`expected a user, got ${registered.kind}`);
    const userId = registered.user.userId;

    // Usage mistakes exit 2 and change nothing; refusals exit 1 with the server's reason.
    expect((await cli(["cards", "transfer", userId, "--url", svc.baseUrl])).code).toBe(EXIT.usage);
    expect((await cli(["cards", "move", userId, "--to", "bank-t", "--url", svc.baseUrl])).code).toBe(
      EXIT.usage,
    );
    const nobody = await cli(["cards", "transfer", "usr_nobody", "--to", "bank-t", "--url", svc.baseUrl]);
    expect(nobody.code).toBe(EXIT.failure);
    expect(nobody.err).toContain("No user holding a card");
    const same = await cli(["cards", "transfer", userId, "--to", "issuer-1", "--url", svc.baseUrl]);
    expect(same.code).toBe(EXIT.failure);
    expect(same.err).toContain("toTenant");
    expect((await svc.store.users.findByPanHash(hashedPan))?.userId).toBe(userId);

    const moved = await cli(["cards", "transfer", userId, "--to", "bank-t", "--json", "--url", svc.baseUrl]);
    expect(moved.err).toBe("");
    expect(moved.code).toBe(EXIT.ok);
    const answer = JSON.parse(moved.out) as { previousUserId: string; userId: string; toTenant: string };
    expect(answer).toMatchObject({ previousUserId: userId, fromTenant: "issuer-1", toTenant: "bank-t" });
    const holder = await svc.store.users.findByPanHash(hashedPan);
    expect(holder).toMatchObject({ userId: answer.userId, tenantId: "bank-t" });
    expect((await svc.store.users.findById(userId))?.supersededAt).toBeDefined();
    const audit = await cli(["audit", "--tenant", "bank-t", "--json", "--url", svc.baseUrl]);
    expect(JSON.parse(audit.out).map((e: { action: string }) => e.action)).toContain(
      "admin.card.transferred",
    );
    // The card never goes back to the previous holder by replaying the command.
    expect((await cli(["cards", "transfer", userId, "--to", "bank-t", "--url", svc.baseUrl])).code).toBe(
      EXIT.failure,
    );
  });

  it("answers every command in JSON with --json, failures too, with the same exit codes", async () => {
    process.env.ADMIN_TOKEN = TOKEN;
    const url = ["--url", svc.baseUrl, "--json"];
    const json = async (args: string[]) => {
      const run = await cli([...args, ...url]);
      expect(run.err, args.join(" ")).toBe("");
      expect(run.code, args.join(" ")).toBe(EXIT.ok);
      return JSON.parse(run.out);
    };
    const created = await json([
      "keys",
      "create",
      "--role",
      "merchant",
      "--tenant",
      "shop-j",
      "--merchant-ids",
      "m-j",
    ]);
    expect(created).toMatchObject({
      role: "merchant",
      tenant: "shop-j",
      tier: "standard",
      merchantIds: ["m-j"],
    });
    expect(created.apiKey).toMatch(/^rk_dev_/);
    expect(created.apiKeyId).toEqual(expect.any(String));
    // The key printed in the JSON works.
    expect(
      (await post(svc, "/api/v1/receipts/encrypt", created.apiKey, receiptBody({ merchantId: "m-j" })))
        .status,
    ).toBe(200);
    const issuer = await json(["keys", "create", "--role", "issuer", "--tenant", "bank-j"]);
    const view = { tenant: "bank-j", bins: ["677771"], tokenBins: [] };
    expect(await json(["bins", "set", "bank-j", "677771"])).toEqual(view);
    expect(await json(["bins", "get", "bank-j"])).toEqual(view);
    expect(await json(["merchants", "assign", "m-j2", "--tenant", "shop-j"])).toEqual({
      merchantId: "m-j2",
      tenant: "shop-j",
    });
    const listed = await json(["keys", "list", "--tenant", "bank-j"]);
    expect(listed.map((k: { apiKeyId: string }) => k.apiKeyId)).toEqual([issuer.apiKeyId]);
    expect(await json(["keys", "revoke", issuer.apiKeyId])).toEqual({
      apiKeyId: issuer.apiKeyId,
      revoked: true,
    });
    expect(await json(["audit", "--tenant", "bank-j", "--limit", "1"])).toHaveLength(1);
    expect(Array.isArray(await json(["escrow"]))).toBe(true);

    // Failures: one JSON object on stderr, nothing on stdout, the usual exit code.
    const failed = async (args: string[], exit: number, code: string) => {
      const run = await cli([...args, ...url]);
      expect(run.code, args.join(" ")).toBe(exit);
      expect(run.out).toBe("");
      expect(JSON.parse(run.err)).toEqual({ error: { code, message: expect.any(String) } });
    };
    await failed(["keys", "revoke", "key_nonexistent"], EXIT.failure, "not_found");
    await failed(["bins", "set", "bank-j", "12ab"], EXIT.failure, "invalid_request");
    await failed(["keys", "create", "--role", "king", "--tenant", "x"], EXIT.usage, "usage");
    delete process.env.ADMIN_TOKEN;
    await failed(["escrow"], EXIT.config, "configuration");
  });

  it("sets BINs and token BINs with the root's statements from files once the tenant has a confirmed root", async () => {
    process.env.ADMIN_TOKEN = TOKEN;
    const url = ["--url", svc.baseUrl];
    const key = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "bank-r" });
    const root = await generateIssuerSigner("Ed25519");
    expect((await post(svc, "/api/v1/issuers/signing-keys", key, { publicKey: root.spki })).status).toBe(200);
    const before = await cli(["bins", "set", "bank-r", "688881", "--token-bins", "68888801", ...url]);
    expect(before.code, before.err).toBe(EXIT.ok);
    expect(before.out).toContain("Tenant bank-r owns 688881 and token BINs 68888801.");
    const confirm = `/admin/v1/issuers/bank-r/signing-keys/${root.signingKeyId}/confirm`;
    const confirmed = await fetch(`${svc.baseUrl}${confirm}`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(confirmed.status).toBe(200);

    // The operator alone is refused, exit 1, nothing changed.
    const alone = await cli(["bins", "set", "bank-r", "688881,688882", ...url]);
    expect(alone.code).toBe(EXIT.failure);
    expect(alone.err).toContain("statements");
    const claim = (prefix: string, kind: "bin" | "token-bin", version: number) =>
      signStatement(
        statementOf({
          v: 1,
          type: "receipts.v1/bin-claim",
          issuer: "bank-r",
          prefix,
          kind,
          version,
          issuedAt: formatTime(Date.now()),
        }),
        root,
      );
    const dir = await mkdtemp(join(tmpdir(), "bins-"));
    const file = join(dir, "statements.json");
    const signed = [await claim("688882", "bin", 1), await claim("68888802", "token-bin", 2)];
    await writeFile(
      file,
      JSON.stringify(signed.map((s) => ({ statement: s.statement, signature: s.signature }))),
    );
    const args = ["bins", "set", "bank-r", "688881,688882", "--token-bins", "68888801,68888802"];
    const set = await cli([...args, "--statements", file, "--json", ...url]);
    expect(set.err).toBe("");
    expect(JSON.parse(set.out)).toEqual({
      tenant: "bank-r",
      bins: ["688881", "688882"],
      tokenBins: ["68888801", "68888802"],
    });
    const shown = await cli(["bins", "get", "bank-r", ...url]);
    expect(shown.out).toBe("688881\n688882\n68888801 (token)\n68888802 (token)\n");
    // The same file again is a replay (its versions are spent); a missing file or one that is not JSON
    // is a usage error.
    const replay = await cli(["bins", "set", "bank-r", "688881", "--statements", file, ...url]);
    expect(replay.code).toBe(EXIT.failure);
    expect((await cli([...args, "--statements", join(dir, "none.json"), ...url])).code).toBe(EXIT.usage);
    await writeFile(file, "not json");
    expect((await cli([...args, "--statements", file, ...url])).code).toBe(EXIT.usage);
    expect(await svc.store.bins.list("bank-r")).toEqual(["688881", "688882"]);
  });

  it("exits 78 with a clear message when --url is given without ADMIN_TOKEN, and 1 with a wrong one", async () => {
    delete process.env.ADMIN_TOKEN;
    for (const args of [
      ["keys", "create", "--role", "issuer", "--tenant", "bank-x", "--url", svc.baseUrl],
      ["bins", "set", "bank-x", "677777", "--url", svc.baseUrl],
      ["merchants", "assign", "m-x", "--tenant", "shop-x", "--url", svc.baseUrl],
      ["audit", "--url", svc.baseUrl],
      ["escrow", "--url", svc.baseUrl],
    ]) {
      const run = await cli(args);
      expect(run.code, args.join(" ")).toBe(EXIT.config);
      expect(run.err).toContain("ADMIN_TOKEN");
      expect(run.out).toBe("");
    }
    process.env.ADMIN_TOKEN = `${TOKEN}-wrong`;
    const wrong = await cli(["bins", "set", "bank-x", "677777", "--url", svc.baseUrl]);
    expect(wrong.code).toBe(EXIT.failure);
    expect(wrong.err).toContain("ADMIN_TOKEN");
    expect(await svc.store.bins.list("bank-x")).toEqual([]);
    expect(await svc.store.apiKeys.list("bank-x")).toEqual([]);
  });
});

describe("operator commands against a server whose operator API is off", () => {
  let svc: TestService;
  const saved = process.env.ADMIN_TOKEN;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(async () => {
    if (saved === undefined) delete process.env.ADMIN_TOKEN;
    else process.env.ADMIN_TOKEN = saved;
    await svc.close();
  });

  it("says the operator API is off and exits 78", async () => {
    process.env.ADMIN_TOKEN = TOKEN;
    for (const args of [
      ["keys", "list", "--url", svc.baseUrl],
      ["bins", "get", "bank-a", "--url", svc.baseUrl],
      ["escrow", "--url", svc.baseUrl],
    ]) {
      const run = await cli(args);
      expect(run.err, args.join(" ")).toContain("The operator API is off");
      expect(run.code, args.join(" ")).toBe(EXIT.config);
    }
  });
});
