import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startService, type TestService } from "../support/harness.js";

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
const README = readFileSync(join(import.meta.dirname, "..", "..", "README.md"), "utf8");

/** The ```sh blocks between the walk-through markers, in order. */
function walkthroughBlocks(): string[] {
  const start = README.indexOf("<!-- walkthrough:start -->");
  const end = README.indexOf("<!-- walkthrough:end -->");
  if (start < 0 || end < start) throw new Error("README.md has no <!-- walkthrough:start/end --> section");
  return [...README.slice(start, end).matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1] ?? "");
}

/** The fenced block right after `<!-- doctest:<name> -->`. */
export function doctestBlock(name: string): string {
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
export function bash(
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

function have(command: string): boolean {
  return spawnSync("bash", ["-c", `command -v ${command}`]).status === 0;
}

describe("the README's curl walk-through", () => {
  let svc: TestService;
  let dir: string;
  beforeAll(async () => {
    svc = await startService();
    dir = mkdtempSync(join(tmpdir(), "readme-walkthrough-"));
  });
  afterAll(async () => {
    await svc.close();
    rmSync(dir, { recursive: true, force: true });
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

  it("runs every block in order, twice in a row, each step succeeding", async () => {
    const blocks = walkthroughBlocks();
    expect(blocks.length).toBeGreaterThanOrEqual(2);
    const script = `set -euo pipefail\n${blocks.join("\n")}`;
    const env = {
      ...process.env,
      ISSUER: svc.issuerKey,
      MERCHANT: svc.merchantKey,
      API: `${svc.baseUrl}/api/v1`,
    };
    const payments = new Set<string>();
    for (const run of [1, 2]) {
      const result = await bash(script, { cwd: dir, env });
      expect(result.status, `run ${run} failed:\n${result.stderr}\n${result.stdout.slice(-3000)}`).toBe(0);
      const receipt = JSON.parse(readFileSync(join(dir, "receipt.json"), "utf8"));
      expect(receipt.data.merchantName).toBe("Corner Coffee");
      const payment = JSON.parse(readFileSync(join(dir, "payment.json"), "utf8"));
      expect(payment.data.paymentId).toMatch(/^pay_/);
      payments.add(payment.data.paymentId);
      const released = JSON.parse(readFileSync(join(dir, "new-user.json"), "utf8"));
      expect(released.data.releasedReceipts).toBe(1);
    }
    expect(payments.size).toBe(2);
  }, 120_000);
});
