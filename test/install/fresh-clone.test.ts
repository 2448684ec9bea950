import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join, sep } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

/**
 * The production install of the README, from a fresh clone, as a new machine does it: `git clone`
 * of this repository's committed HEAD into a temporary folder, then the machine's own npm and Node
 * (this test's PATH without any node_modules/.bin), the npm cache reused and the registry the only
 * network. It takes one to two minutes on two cores, so `npm test` skips it and CI runs it as a step
 * of its own: `FRESH_CLONE_TEST=1 npx vitest run test/install`. Each step's time is printed.
 */
const enabled = process.env.FRESH_CLONE_TEST === "1";
const ROOT = join(import.meta.dirname, "..", "..");
const INSTALL_TIMEOUT_MS = 600_000;

/** The environment of a fresh machine's shell: PATH without node_modules/.bin, no npm_* of this run. */
function machineEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.toLowerCase().startsWith("npm_") || name === "npm_config_cache") env[name] = value;
  }
  env.PATH = (process.env.PATH ?? "")
    .split(delimiter)
    .filter((dir) => !dir.endsWith(`${sep}node_modules${sep}.bin`))
    .join(delimiter);
  return {
    ...env,
    npm_config_prefer_offline: "true",
    npm_config_audit: "false",
    npm_config_fund: "false",
    npm_config_update_notifier: "false",
    ...extra,
  };
}

/** Runs `command` in `cwd`; resolves with its status, output (stdout and stderr together) and time. */
function sh(
  command: string,
  cwd: string,
  env = machineEnv(),
): Promise<{ status: number | null; stdout: string; output: string }> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn("sh", ["-c", command], { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      output += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.on("error", reject);
    child.on("close", (status) => {
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      console.log(`[fresh clone] ${command}: exit ${status}, ${seconds} s`);
      resolve({ status, stdout, output });
    });
  });
}

/** What `npm start` logged when it listened, read from its stdout. */
interface Listening {
  address: { address: string; port: number };
  node: string;
}

/** Starts `npm start` in its own process group; resolves once the service says it listens. */
function npmStart(
  cwd: string,
  env: NodeJS.ProcessEnv,
): Promise<{ child: ChildProcess; listening: Listening }> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn("npm", ["start"], { cwd, env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    let listened = false;
    const timer = setTimeout(() => reject(new Error(`npm start did not listen:\n${output}`)), 60_000);
    const read = (chunk: Buffer) => {
      output += chunk.toString();
      for (const line of output.split("\n")) {
        if (listened || !line.includes('"receipts service listening"')) continue;
        listened = true;
        clearTimeout(timer);
        const seconds = ((performance.now() - started) / 1000).toFixed(1);
        console.log(`[fresh clone] npm start: listening after ${seconds} s`);
        resolve({ child, listening: JSON.parse(line) as Listening });
        return;
      }
    };
    child.stdout?.on("data", read);
    child.stderr?.on("data", read);
    child.on("exit", (code) => reject(new Error(`npm start exited (${code}):\n${output}`)));
  });
}

/** Stops a process started by {@link npmStart}: SIGTERM to its group (npm, sh and node). */
async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.pid === undefined) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  process.kill(-child.pid, "SIGTERM");
  await exited;
}

describe.skipIf(!enabled)("the production install, from a fresh clone", () => {
  let dir: string;
  let repo: string;
  let server: ChildProcess | undefined;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "fresh-clone-"));
    repo = join(dir, "repo");
    const clone = await sh(`git clone --quiet ${JSON.stringify(ROOT)} repo`, dir);
    expect(clone.status, clone.output).toBe(0);
  });
  afterAll(async () => {
    if (server !== undefined) await stop(server);
    rmSync(dir, { recursive: true, force: true });
  });

  it(
    "npm ci --omit=dev says what to do instead, without a stack trace",
    async () => {
      const result = await sh("npm ci --omit=dev", repo);
      expect(result.status).not.toBe(0);
      expect(result.output).toContain("dist/ is not built, and TypeScript is not installed");
      expect(result.output).toContain("npm ci && npm prune --omit=dev");
      expect(result.output).not.toMatch(/^\s+at .+:\d+:\d+\)?$/m);
    },
    INSTALL_TIMEOUT_MS,
  );

  it(
    "npm ci && npm prune --omit=dev installs, and npm start serves on the bundled Node, on 127.0.0.1",
    async () => {
      const install = await sh("npm ci && npm prune --omit=dev", repo);
      expect(install.status, install.output.slice(-3000)).toBe(0);
      expect(existsSync(join(repo, "dist", "src", "main.js"))).toBe(true);
      expect(existsSync(join(repo, "node_modules", "typescript"))).toBe(false);
      expect(existsSync(join(repo, "node_modules", "vitest"))).toBe(false);
      const size = await sh("du -sm node_modules", repo);
      console.log(`[fresh clone] node_modules after prune: ${size.output.trim()}`);

      const token = "fresh-clone-admin-token-0123456789abcdef";
      const env = machineEnv({ PORT: "0", ADMIN_TOKEN: token, LOG_LEVEL: "info" });
      const started = await npmStart(repo, env);
      server = started.child;
      const { address, node } = started.listening;
      expect(address.address).toBe("127.0.0.1");
      const { optionalDependencies } = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
        optionalDependencies: Record<string, string>;
      };
      const bundled = optionalDependencies[`node-${process.platform}-${process.arch}`];
      // Where npm has a Node for the platform, npm start runs on it, whatever the machine's Node is.
      if (bundled !== undefined) expect(node).toBe(`v${bundled}`);
      expect(Number(node.slice(1).split(".")[0])).toBeGreaterThanOrEqual(22);

      const base = `http://127.0.0.1:${address.port}`;
      const health = await fetch(`${base}/healthz`);
      expect(health.status).toBe(200);
      expect(await health.json()).toEqual({ success: true, data: { status: "ok" } });

      // The command line of the pruned install, in JSON, makes a key that works at once.
      const created = await sh(
        `npx receipts keys create --json --url ${base} --role issuer --tenant bank-fresh`,
        repo,
        machineEnv({ ADMIN_TOKEN: token }),
      );
      expect(created.status, created.output).toBe(0);
      const { apiKey } = JSON.parse(created.stdout) as { apiKey: string };
      const keys = await fetch(`${base}/api/v1/onboarding/generate-keys`, {
        method: "POST",
        headers: { "x-api-key": apiKey, "content-type": "application/json" },
        body: "{}",
      });
      expect(keys.status).toBe(200);
      await stop(server);
      expect(server.exitCode ?? server.signalCode).not.toBeNull();
      server = undefined;
    },
    INSTALL_TIMEOUT_MS,
  );
});
