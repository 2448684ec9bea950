import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";
import { ESCROW_FIXTURE } from "./fixture-keys.js";

/**
 * The service as `npm start` runs it (`node dist/src/main.js`, built first if the sources changed),
 * in a process of its own, for attacks whose failure mode is the death of the process: a test of the
 * test's own process could not see it die. Embedded store, development environment, the two API keys
 * it prints at start-up.
 */

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** A running service process. */
export interface ServerProcess {
  baseUrl: string;
  port: number;
  pid: number;
  issuerKey: string;
  merchantKey: string;
  /** Whether the process is still running (neither exited nor killed by a signal). */
  alive(): boolean;
  /** How it ended, once it has: `SIGABRT` for a native abort. */
  ended(): { code: number | null; signal: string | null } | undefined;
  /** Resolves true once it has exited, or false when it is still running after `ms`. */
  exitedWithin(ms: number): Promise<boolean>;
  /** Everything it wrote to stdout and stderr so far. */
  output(): string;
  /** The log lines it wrote at level 50 (error) or above: every 5xx logs its cause there. */
  errorLines(): string[];
  /** Its resident memory in MB, as its own /metrics reports it. */
  rssMb(): Promise<number>;
  /** Stops it (SIGTERM) and waits for it to exit. */
  stop(): Promise<void>;
}

/** Builds dist/ if a source is newer than the last build (as `npm start` does). */
export function buildIfStale(): void {
  const build = spawnSync(process.execPath, ["scripts/build-if-stale.mjs"], { cwd: ROOT, encoding: "utf8" });
  if (build.status !== 0) throw new Error(`build failed: ${build.stderr}${build.stdout}`);
}

/** A port no one listens on right now (the OS picks it; the service then binds it). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Starts the service on a free port with `env` on top of a test configuration. */
export async function startServerProcess(env: NodeJS.ProcessEnv = {}): Promise<ServerProcess> {
  buildIfStale();
  const port = await freePort();
  const child: ChildProcess = spawn(process.execPath, ["--max-semi-space-size=64", "dist/src/main.js"], {
    cwd: ROOT,
    env: {
      ...process.env,
      PORT: String(port),
      HOST: "127.0.0.1",
      RECEIPTS_ENV: "dev",
      LOG_LEVEL: "info",
      ESCROW_PRIVATE_KEY: ESCROW_FIXTURE.privateKey,
      CRYPTO_THREADS: "2",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let end: { code: number | null; signal: string | null } | undefined;
  child.stdout?.on("data", (chunk) => {
    out += String(chunk);
  });
  child.stderr?.on("data", (chunk) => {
    out += String(chunk);
  });
  const exited = new Promise<void>((resolve) => {
    child.on("exit", (code, signal) => {
      end = { code, signal };
      resolve();
    });
  });
  const deadline = Date.now() + 30_000;
  while (!/merchant \(tenant dev-merchant\): +\S+/.test(out)) {
    if (end !== undefined || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`the service did not start: ${JSON.stringify(end)}\n${out.slice(-2000)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const issuerKey = /issuer +\(tenant dev-issuer\): +(\S+)/.exec(out)?.[1] ?? "";
  const merchantKey = /merchant \(tenant dev-merchant\): +(\S+)/.exec(out)?.[1] ?? "";
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    port,
    pid: child.pid ?? 0,
    issuerKey,
    merchantKey,
    alive: () => end === undefined,
    ended: () => end,
    exitedWithin: (ms) =>
      Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]),
    output: () => out,
    errorLines: () => out.split("\n").filter((line) => levelOf(line) >= 50),
    async rssMb() {
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      return Number(/^process_resident_memory_bytes (\d+)/m.exec(text)?.[1] ?? Number.NaN) / 1_048_576;
    },
    async stop() {
      if (end === undefined) child.kill("SIGTERM");
      await exited;
    },
  };
}

/** The pino level of a log line; 0 for a line that is not one (the key banner, a line still being written). */
function levelOf(line: string): number {
  if (!line.startsWith("{")) return 0;
  try {
    return (JSON.parse(line) as { level?: number }).level ?? 0;
  } catch {
    return 0;
  }
}
