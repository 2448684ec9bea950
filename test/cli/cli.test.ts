import { type AddressInfo, createServer } from "node:net";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defaultDemoUrl, EXIT, runCli } from "../../src/cli/main.js";
import { startService, type TestService } from "../support/harness.js";

/** A port nothing listens on (bound, then released). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

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

describe("receipts command line", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it("demo runs the five steps and escrow against a running server, masking secrets", async () => {
    const out = capture();
    const err = capture();
    const code = await runCli(
      ["demo", "--url", svc.baseUrl, "--issuer-key", svc.issuerKey, "--merchant-key", svc.merchantKey],
      out,
      err,
    );
    const text = out.text();
    expect(err.text()).toBe("");
    expect(code).toBe(EXIT.ok);
    for (const step of ["== 1.", "== 2.", "== 3.", "== 4.", "== 5.", "Escrow: registering"]) {
      expect(text).toContain(step);
    }
    expect(text).toContain('"merchantName": "Demo Coffee"');
    expect(text).toContain('"releasedReceipts": 1');
    expect(text).toContain("Done: escrowed=true, released=1, ciphertext unchanged=true.");
    expect(text).toContain('"privateKey": "[masked]"');
    expect(text).not.toMatch(/"privateKey": "MII/);
    expect(text).not.toMatch(/tok_[A-Za-z0-9_-]{20}/);
    expect(text).not.toMatch(/_secret_[0-9a-f]{8}/);
  });

  it("demo --json prints one JSON document: every step, secrets masked, and the result", async () => {
    const out = capture();
    const err = capture();
    const args = [
      "demo",
      "--url",
      svc.baseUrl,
      "--issuer-key",
      svc.issuerKey,
      "--merchant-key",
      svc.merchantKey,
    ];
    expect(await runCli([...args, "--json"], out, err)).toBe(EXIT.ok);
    expect(err.text()).toBe("");
    const doc = JSON.parse(out.text());
    expect(doc.result).toEqual({ escrowed: true, released: 1, ciphertextUnchanged: true });
    expect(doc.card).toMatch(/^4111\.\.\.\d{4}$/);
    const titles = doc.steps.map((step: { title: string }) => step.title);
    expect(titles[0]).toBe("1. Issuer: generate a key pair");
    expect(titles).toHaveLength(9);
    for (const step of doc.steps) expect(step.response.status).toBe(200);
    const keys = doc.steps[0].response.body.data;
    expect(keys.privateKey).toBe("[masked]");
    expect(keys.publicKey.length).toBeGreaterThan(300);
    expect(out.text()).not.toMatch(/tok_[A-Za-z0-9_-]{20}/);
    expect(out.text()).not.toMatch(/_secret_[0-9a-f]{8}/);
    // A failed step: the error as JSON on stderr, exit 1.
    const failed = capture();
    const bad = [
      "demo",
      "--url",
      svc.baseUrl,
      "--issuer-key",
      svc.merchantKey,
      "--merchant-key",
      svc.merchantKey,
    ];
    expect(await runCli([...bad, "--json"], capture(), failed)).toBe(EXIT.failure);
    expect(JSON.parse(failed.text()).error).toEqual({
      code: "demo_failed",
      message: 'Demo failed: step "1. Issuer: generate a key pair" failed with HTTP 403',
    });
  });

  it("demo exits 1 with a clear message when a step fails, and 2 without keys", async () => {
    const err = capture();
    const code = await runCli(
      ["demo", "--url", svc.baseUrl, "--issuer-key", svc.merchantKey, "--merchant-key", svc.merchantKey],
      capture(),
      err,
    );
    expect(code).toBe(EXIT.failure);
    expect(err.text()).toMatch(/Demo failed: step "1. Issuer: generate a key pair" failed with HTTP 403/);
    const usage = capture();
    expect(await runCli(["demo", "--url", svc.baseUrl], capture(), usage)).toBe(EXIT.usage);
    expect(usage.text()).toMatch(/demo needs --issuer-key and --merchant-key/);
  });

  it("has --help on every command and usage errors exit 2", async () => {
    for (const args of [
      ["--help"],
      ["keys", "--help"],
      ["keys", "create", "--help"],
      ["keys", "list", "--help"],
      ["keys", "revoke", "--help"],
      ["demo", "--help"],
    ]) {
      const out = capture();
      expect(await runCli(args, out, capture())).toBe(EXIT.ok);
      expect(out.text()).toMatch(/^Usage: receipts/);
    }
    expect(await runCli(["bogus"], capture(), capture())).toBe(EXIT.usage);
    expect(await runCli([], capture(), capture())).toBe(EXIT.usage);
  });

  it("demo --help shows the demo's own options and where --url defaults to", async () => {
    const out = capture();
    expect(await runCli(["demo", "--help"], out, capture())).toBe(EXIT.ok);
    const text = out.text();
    expect(text).toMatch(/^Usage: receipts demo /);
    for (const option of ["--url", "--issuer-key", "--merchant-key", "RECEIPTS_URL", "PORT"]) {
      expect(text).toContain(option);
    }
    expect(text).toContain("default http://localhost:$PORT");
    expect(text).not.toContain("keys create");
  });

  it("demo calls http://localhost:$PORT by default, PORT from the environment", async () => {
    expect(defaultDemoUrl({})).toBe("http://localhost:8080");
    expect(defaultDemoUrl({ PORT: "9123" })).toBe("http://localhost:9123");
    const out = capture();
    const err = capture();
    const env = {
      PORT: String(svc.port),
      RECEIPTS_ISSUER_KEY: svc.issuerKey,
      RECEIPTS_MERCHANT_KEY: svc.merchantKey,
    };
    expect(await runCli(["demo"], out, err, env)).toBe(EXIT.ok);
    expect(err.text()).toBe("");
    expect(out.text()).toContain("Done: escrowed=true");
  });

  it("demo says clearly which address it could not connect to, and how to change it", async () => {
    const closed = await freePort();
    const err = capture();
    const env = { PORT: String(closed), RECEIPTS_ISSUER_KEY: "rk_dev_x", RECEIPTS_MERCHANT_KEY: "rk_dev_y" };
    expect(await runCli(["demo"], capture(), err, env)).toBe(EXIT.failure);
    expect(err.text()).toContain(`cannot connect to http://localhost:${closed} (the default, from PORT)`);
    expect(err.text()).toMatch(/ECONNREFUSED/);
    expect(err.text()).toMatch(
      /Is the server running there\? Start it with npm start, or give its address with --url/,
    );
  });

  it("refuses to manage keys in the embedded store, which lives inside the server", async () => {
    const err = capture();
    expect(await runCli(["keys", "list"], capture(), err)).toBe(EXIT.config);
    expect(err.text()).toMatch(/embedded in-memory store lives inside the server process/);
  });
});
