import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startWitnessServer } from "../../src/cli/witness-server.js";
import { COSIGNATURE_ED25519, formatVkey, NOTE_ED25519 } from "../../src/kt/note.js";
import { formatNoteSkey, generateNoteSigner } from "../../src/kt/note-keys.js";
import { ESCROW_FIXTURE } from "../support/fixture-keys.js";
import { get, hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";

const ROOT = join(import.meta.dirname, "..", "..");

/**
 * The README's walk-through, run from README.md itself so the two cannot drift.
 *
 * Markers (HTML comments, invisible on GitHub):
 * - `<!-- walkthrough:start -->` ... `<!-- walkthrough:end -->`: every ```sh block between them is
 *   run, in order, as one bash script under `set -euo pipefail`, with ISSUER, MERCHANT and API set to a
 *   server started here (the README's `${ISSUER:-...}` defaults give way to them). Each step must
 *   succeed: curl's `--fail-with-body` and the README's own `jq -e` checks fail the script otherwise.
 *   The script runs twice in a row against the same server: the walk-through must be re-runnable.
 * - `<!-- doctest:<name> -->` right before a fenced block: that block is run by the test named so below.
 */
const README = readFileSync(join(ROOT, "README.md"), "utf8");

/** The ```sh blocks between the walk-through markers, in order. */
function walkthroughBlocks(): string[] {
  const start = README.indexOf("<!-- walkthrough:start -->");
  const end = README.indexOf("<!-- walkthrough:end -->");
  if (start < 0 || end < start) throw new Error("README.md has no <!-- walkthrough:start/end --> section");
  return [...README.slice(start, end).matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1] ?? "");
}

/** The fenced block right after `<!-- doctest:<name> -->`. */
function doctestBlock(name: string): string {
  const marker = `<!-- doctest:${name} -->`;
  const at = README.indexOf(marker);
  if (at < 0) throw new Error(`README.md has no ${marker}`);
  const block = /^\s*```[a-z]*\n([\s\S]*?)^```$/m.exec(README.slice(at + marker.length));
  if (block === null) throw new Error(`no fenced block after ${marker}`);
  return block[1] ?? "";
}

/**
 * Runs a bash script without blocking the event loop (the service under test answers in this
 * process); resolves with its exit status and output.
 */
function bash(
  script: string,
  options: { cwd: string; env: NodeJS.ProcessEnv },
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", ["-c", script], { ...options, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    child.on("error", reject);
    child.on("close", (status) => resolve({ status, stdout, stderr }));
  });
}

/**
 * The key log `npm run start:kt` sets up (scripts/start-kt.mjs): the log's signing key, three witness
 * servers of two organisations, and the merchant's trust policy in a file; `env` configures the service.
 */
async function keyLogWithWitnesses() {
  const dir = mkdtempSync(join(tmpdir(), "readme-kt-"));
  const origin = "localhost/receipts/kt/v1";
  const log = generateNoteSigner(origin, NOTE_ED25519);
  const witnesses: Array<{ url: string; vkey: string; organisation: string; close: () => Promise<void> }> =
    [];
  for (const [name, organisation] of [
    ["w1.bank-a.example", "bank-a"],
    ["w2.bank-b.example", "bank-b"],
    ["w3.ngo.example", "ngo"],
  ] as const) {
    const signer = generateNoteSigner(name, COSIGNATURE_ED25519);
    const running = await startWitnessServer({
      config: { signers: [signer], logs: { [origin]: [log.key] } },
      statePath: join(dir, `${name}.state`),
      port: 0,
    });
    witnesses.push({ url: running.url, vkey: formatVkey(signer.key), organisation, close: running.close });
  }
  const policy = join(dir, "kt-policy.json");
  writeFileSync(
    policy,
    JSON.stringify({
      origin,
      logKey: formatVkey(log.key),
      operator: "receipts-operator",
      witnesses: witnesses.map(({ vkey, organisation }) => ({ vkey, organisation })),
      quorum: 2,
      maxCheckpointAgeSeconds: 3600,
      // A development service: its roots count at once (KT_ROOT_DELAY 0).
      rootDelaySeconds: 0,
    }),
  );
  return {
    dir,
    policy,
    env: {
      KT_LOG_PRIVATE_KEY: formatNoteSkey(log),
      WITNESS_URLS: witnesses.map((w) => `${w.url} ${w.vkey}`).join(","),
    },
    close: async () => {
      for (const w of witnesses) await w.close();
    },
  };
}

function have(command: string): boolean {
  return spawnSync("bash", ["-c", `command -v ${command}`]).status === 0;
}

describe("the README's curl walk-through", () => {
  let svc: TestService;
  /** Where the script starts, standing in for the repository's root: it must stay empty. */
  let start: string;
  /** The walk-through's TMPDIR: its `mktemp -d` folders are made here. */
  let temp: string;
  /** What `npm run start:kt` makes: three witnesses, the log's key, the trust policy, an operator token. */
  let kt: Awaited<ReturnType<typeof keyLogWithWitnesses>>;
  const ADMIN = "readme-walkthrough-admin-token-0123456789";
  beforeAll(async () => {
    kt = await keyLogWithWitnesses();
    svc = await startService({ env: { ...kt.env, ADMIN_TOKEN: ADMIN } });
    start = mkdtempSync(join(tmpdir(), "readme-walkthrough-root-"));
    temp = mkdtempSync(join(tmpdir(), "readme-walkthrough-tmp-"));
  });
  afterAll(async () => {
    await svc.close();
    await kt.close();
    rmSync(start, { recursive: true, force: true });
    rmSync(temp, { recursive: true, force: true });
    rmSync(kt.dir, { recursive: true, force: true });
  });

  it("needs only bash, curl, jq and node", () => {
    for (const command of ["bash", "curl", "jq", "node"]) {
      expect(have(command), `${command} is missing (apt-get install -y ${command})`).toBe(true);
    }
    const script = walkthroughBlocks().join("\n");
    for (const other of ["uuidgen", "openssl", "sha256sum", "python", "$RANDOM"]) {
      expect(script, other).not.toContain(other);
    }
  });

  it("leaves the walk-through's merchantIds unsigned in any signing-key example", () => {
    // Registering a signing key makes signatures mandatory for that merchantId (README, "Merchant
    // signatures"), so an example that registers one must not use a merchantId the unsigned walk-through
    // uses.
    const blocks = [...README.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1] ?? "");
    const signing = blocks.filter((block) => block.includes("/receipts/signing-keys")).join("\n");
    const registered = [...signing.matchAll(/merchantId\\?":\\?"([^"\\]+)/g)].map((m) => m[1]);
    const walkthrough = walkthroughBlocks().join("\n");
    for (const id of registered) expect(walkthrough).not.toContain(`merchantId\\":\\"${id}\\"`);
    expect(signing === "" || registered.length > 0).toBe(true);
  });

  it("runs every block in order, twice in a row, each step succeeding", async () => {
    const blocks = walkthroughBlocks();
    expect(blocks.length).toBeGreaterThanOrEqual(2);
    // The walk-through seals and opens with the built client library, as after npm ci.
    const build = await bash("node scripts/build-if-stale.mjs", { cwd: ROOT, env: process.env });
    expect(build.status, build.stderr).toBe(0);
    const script = `set -euo pipefail\n${blocks.join("\n")}`;
    const env = {
      ...process.env,
      ISSUER: svc.issuerKey,
      MERCHANT: svc.merchantKey,
      ADMIN,
      POLICY: kt.policy,
      API: `${svc.baseUrl}/api/v1`,
      CLIENT: join(ROOT, "dist", "src", "client", "index.js"),
    };
    const payments = new Set<string>();
    const seen = new Set<string>();
    for (const run of [1, 2]) {
      const result = await bash(script, { cwd: start, env: { ...env, TMPDIR: temp } });
      expect(result.status, `run ${run} failed:\n${result.stderr}\n${result.stdout.slice(-3000)}`).toBe(0);
      // Nothing where the reader started; every file, private keys among them, in a folder of its own.
      expect(readdirSync(start)).toEqual([]);
      const folders = readdirSync(temp);
      expect(folders).toHaveLength(run);
      const dir = join(temp, folders.find((f) => !seen.has(f)) ?? "");
      seen.add(basename(dir));
      for (const secret of ["device-key.json", "keys.json", "new-keys.json"]) {
        expect(readFileSync(join(dir, secret), "utf8")).toMatch(/"privateKey"/);
      }
      const receipt = JSON.parse(readFileSync(join(dir, "receipt.json"), "utf8"));
      expect(receipt.data.merchantName).toBe("Corner Coffee");
      const payment = JSON.parse(readFileSync(join(dir, "payment.json"), "utf8"));
      expect(payment.data.paymentId).toMatch(/^pay_/);
      payments.add(payment.data.paymentId);
      const released = JSON.parse(readFileSync(join(dir, "new-user.json"), "utf8"));
      expect(released.data.releasedReceipts).toBe(1);
    }
    expect(payments.size).toBe(2);
  }, 180_000);
});

describe("the README's code snippets", () => {
  let svc: TestService;
  let dir: string;
  beforeAll(async () => {
    svc = await startService();
    dir = mkdtempSync(join(tmpdir(), "readme-snippets-"));
  });
  afterAll(async () => {
    await svc.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("runs the TypeScript client snippet as the README says: a file at the root, run by node", async () => {
    // The snippet imports the built client, as a user's script does after npm ci (which builds dist/).
    const build = await bash("node scripts/build-if-stale.mjs", { cwd: ROOT, env: process.env });
    expect(build.status, build.stderr).toBe(0);
    const file = join(ROOT, `.readme-client-${process.pid}.mjs`);
    writeFileSync(file, doctestBlock("client"));
    try {
      const env = {
        ...process.env,
        ISSUER: svc.issuerKey,
        MERCHANT: svc.merchantKey,
        RECEIPTS_URL: svc.baseUrl,
      };
      for (const run of [1, 2]) {
        const result = await bash(`node ${JSON.stringify(file)}`, { cwd: dir, env });
        expect(result.status, `run ${run}:\n${result.stderr}`).toBe(0);
        expect(result.stdout).toMatch(/^payment pay_/m);
        expect(result.stdout).toMatch(/^r-[0-9a-f]{8} Corner Coffee Flat white, Croissant$/m);
        // After the first run the card's key was rotated: only this run's key opens, and is used.
        expect(result.stdout.match(/Corner Coffee/g)).toHaveLength(1);
      }
      expect(existsSync(join(dir, "receipt.svg"))).toBe(true);
      expect(readFileSync(join(dir, "receipt.svg"), "utf8")).toMatch(/^<svg /);
    } finally {
      rmSync(file, { force: true });
    }
  }, 180_000);

  it("runs the gRPC example, and it speaks gRPC (the server counts gRPC calls)", async () => {
    const counted = async () => {
      const metrics = await (await fetch(`${svc.baseUrl}/metrics`)).text();
      const line = (method: string) =>
        new RegExp(`^http_requests_total\\{protocol="grpc",method="${method}",code="ok"\\} (\\d+)$`, "m");
      return [
        "grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        "receipts.v1.OnboardingService/GenerateKeys",
      ].map((method) => Number(line(method).exec(metrics)?.[1] ?? 0));
    };
    const before = await counted();
    const env = { ...process.env, ISSUER: svc.issuerKey, SERVER: svc.baseUrl };
    const result = await bash(`set -euo pipefail\n${doctestBlock("grpc")}`, { cwd: ROOT, env });
    expect(result.status, result.stderr).toBe(0);
    expect(result.stdout).toContain("receipts.v1.PaymentsService/CreatePayment");
    const keys = JSON.parse(result.stdout.slice(result.stdout.indexOf("{")));
    expect(keys.algorithm).toBe("HPKE-P256-SHA256-A256GCM");
    const [reflection = 0, generate = 0] = await counted();
    expect(reflection).toBeGreaterThan(before[0] ?? 0);
    expect(generate).toBe((before[1] ?? 0) + 1);
  });

  it("runs the WebCrypto snippet: its helpers are defined and it opens a listed receipt", async () => {
    const keys = (await post(svc, "/api/v1/onboarding/generate-keys", svc.issuerKey, {})).body.data;
    const hashedPan = hashPan(`4000${Date.now()}`);
    const user = (
      await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
        hashedPan,
        publicKey: keys.publicKey,
        keyId: keys.keyId,
      })
    ).body.data;
    const sent = receiptBody({ recipientHashedPan: hashedPan, currency: "EUR" });
    expect((await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, sent)).status).toBe(200);
    const r = (await get(svc, `/api/v1/receipts/${user.userId}`, svc.issuerKey)).body.data.receipts[0];
    // The snippet's inputs, as the README names them; then the snippet exactly as written.
    const module = [
      "const r = JSON.parse(process.env.SEALED);",
      "const privateKey = process.env.PRIVATE_KEY;",
      doctestBlock("webcrypto"),
      "console.log(JSON.stringify(receipt));",
    ].join("\n");
    const file = join(dir, "webcrypto.mjs");
    writeFileSync(file, module);
    const open = async (sealed: unknown, privateKey: string) => {
      const env = { ...process.env, SEALED: JSON.stringify(sealed), PRIVATE_KEY: privateKey };
      const result = await bash(`node ${JSON.stringify(file)}`, { cwd: dir, env });
      expect(result.status, result.stderr).toBe(0);
      return JSON.parse(result.stdout);
    };
    expect(r.keyBundle.aadBound).toBe(false);
    const opened = await open(r, keys.privateKey);
    expect(opened.receiptId).toBe(sent.receiptId);
    expect(opened.merchantName).toBe("Corner Coffee");
    expect(opened.items.map((item: { name: string }) => item.name)).toEqual(["Flat white", "Croissant"]);
    // An escrowed receipt is the bound form (OAEP label = the AAD): the snippet opens it with the
    // escrow key, which the test service's escrow fixture is.
    const escrowed = receiptBody({ recipientHashedPan: hashPan(`4999${Date.now()}`), currency: "EUR" });
    const held = (await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, escrowed)).body.data;
    expect(held.keyBundle.aadBound).toBe(true);
    expect((await open(held, ESCROW_FIXTURE.privateKey)).receiptId).toBe(escrowed.receiptId);
  });
});
