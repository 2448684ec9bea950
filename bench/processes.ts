import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

/**
 * The child processes of a benchmark run (the service, its cluster, the baseline): started on
 * loopback ports, their output written to a temporary file (read for the development API keys, never
 * piped, so a chatty log cannot slow the service down or fill a pipe), and always stopped: by
 * {@link stopAll} at the end, on error and on SIGINT, and with SIGKILL if the bench itself exits first.
 */

/** A started child process. */
export interface Child {
  readonly name: string;
  readonly process: ChildProcess;
  readonly pid: number;
  /** Where its stdout and stderr go. */
  readonly logFile: string;
  /** Resolves with the exit code (or signal name) once it has exited. */
  readonly exited: Promise<string>;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once it has exited. */
  stop(graceMs?: number): Promise<void>;
}

const running = new Set<Child>();
const logDir = mkdtempSync(join(tmpdir(), "receipts-bench-"));

process.once("exit", () => {
  for (const child of running) child.process.kill("SIGKILL");
  rmSync(logDir, { recursive: true, force: true });
});

/** A free TCP port on 127.0.0.1 (taken and released at once; the child binds it right after). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

/** Starts `node [execArgv] script` with `env` added to this process's environment. */
export function startNode(
  name: string,
  script: string,
  env: Record<string, string>,
  execArgv: string[] = [],
): Child {
  const logFile = join(logDir, `${name}.log`);
  const fd = openSync(logFile, "w");
  const child = spawn(process.execPath, [...execArgv, script], {
    env: { ...process.env, ...env },
    stdio: ["ignore", fd, fd],
  });
  closeSync(fd);
  if (child.pid === undefined) throw new Error(`${name} did not start`);
  const exited = new Promise<string>((resolve) =>
    child.once("exit", (code, signal) => resolve(signal ?? String(code))),
  );
  const entry: Child = {
    name,
    process: child,
    pid: child.pid,
    logFile,
    exited,
    async stop(graceMs = 10_000) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
        await exited;
        clearTimeout(timer);
      }
      running.delete(entry);
    },
  };
  running.add(entry);
  void exited.then(() => running.delete(entry));
  return entry;
}

/** Stops every child still running, in parallel. */
export async function stopAll(): Promise<void> {
  await Promise.all([...running].map((child) => child.stop()));
}

/** The last lines of a child's output, for error messages. */
export function logTail(child: Child, lines = 20): string {
  return readFileSync(child.logFile, "utf8").split("\n").slice(-lines).join("\n");
}

/**
 * Waits until `url` answers 200 and `ready(log)` returns a value (e.g. keys parsed from the output),
 * or throws when the child exits or `timeoutMs` passes.
 */
export async function waitReady<T>(
  child: Child,
  url: string,
  ready: (log: string) => T | undefined,
  timeoutMs = 60_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let exitedWith: string | undefined;
  void child.exited.then((code) => {
    exitedWith = code;
  });
  while (Date.now() < deadline) {
    if (exitedWith !== undefined) {
      throw new Error(`${child.name} exited (${exitedWith}) while starting:\n${logTail(child)}`);
    }
    const value = ready(readFileSync(child.logFile, "utf8"));
    const ok = await fetch(url).then(
      (res) => res.ok,
      () => false,
    );
    if (ok && value !== undefined) return value;
    await sleep(100);
  }
  throw new Error(`${child.name} did not become ready within ${timeoutMs} ms:\n${logTail(child)}`);
}

/** Resident set size of process `pid`, in bytes (Linux `/proc`, else `ps`). */
export function rssBytes(pid: number): number {
  if (process.platform === "linux") {
    const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    if (match?.[1] !== undefined) return Number(match[1]) * 1024;
  }
  return Number(execFileSync("ps", ["-o", "rss=", "-p", String(pid)], { encoding: "utf8" }).trim()) * 1024;
}

/** Samples a process's RSS every `intervalMs` until stopped; returns the samples in bytes. */
export function sampleRss(pid: number, intervalMs = 1_000): { stop(): number[] } {
  const samples: number[] = [rssBytes(pid)];
  const timer = setInterval(() => {
    try {
      samples.push(rssBytes(pid));
    } catch {
      // The process is gone; the phase will report its failure.
    }
  }, intervalMs);
  return {
    stop() {
      clearInterval(timer);
      return samples;
    },
  };
}
