import { open, readFile, rename } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { base64, fromBase64Strict } from "../kt/bytes.js";
import { HASH_BYTES } from "../kt/merkle.js";
import { nodeEngine, nodeSha256 } from "../kt/node-engine.js";
import { MAX_NOTE_BYTES } from "../kt/note.js";
import { addCheckpoint, MAX_PROOF_LINES, type WitnessConfig, type WitnessState } from "../kt/witness.js";

/**
 * A C2SP tlog-witness (`POST /add-checkpoint`) around the pure state machine of `src/kt/witness.ts`,
 * for the command line's `receipts witness serve`: a bank (or anyone the merchants trust) runs one
 * beside the service's log. Its state, per log, the size and root it last cosigned, lives in one JSON
 * file; requests are handled one at a time, and the next state is written (a new file, synced,
 * renamed over the old one) before the cosignature is answered, so the witness never cosigns two
 * roots for one size, even across a crash: what it answered is on disk.
 */

export interface WitnessServerOptions {
  config: WitnessConfig;
  /** The state file; created on the first cosignature. */
  statePath: string;
  port: number;
  host?: string;
  /** Seconds since the epoch; default the system clock. */
  now?: () => number;
}

export interface RunningWitness {
  url: string;
  server: Server;
  close(): Promise<void>;
}

/** The most bytes of a request body: 63 proof lines and a note. */
const MAX_BODY = MAX_NOTE_BYTES + (MAX_PROOF_LINES + 2) * (Math.ceil(HASH_BYTES / 3) * 4 + 1) + 64;

/** Reads a state file; an absent file is the empty state. A malformed one is an error (never silently reset). */
export async function readWitnessState(path: string): Promise<WitnessState> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return {};
    throw err;
  }
  const parsed = JSON.parse(text) as Record<string, { size?: unknown; root?: unknown }>;
  const state: Record<string, { size: number; root: Uint8Array }> = {};
  for (const [origin, held] of Object.entries(parsed)) {
    const root = typeof held.root === "string" ? fromBase64Strict(held.root, HASH_BYTES) : undefined;
    if (!Number.isSafeInteger(held.size) || (held.size as number) < 0 || root === undefined) {
      throw new Error(`the witness state file ${path} is malformed at ${origin}`);
    }
    state[origin] = { size: held.size as number, root };
  }
  return state;
}

async function writeWitnessState(path: string, state: WitnessState): Promise<void> {
  const json: Record<string, { size: number; root: string }> = {};
  for (const [origin, held] of Object.entries(state))
    json[origin] = { size: held.size, root: base64(held.root) };
  const temporary = `${path}.${process.pid}.tmp`;
  const file = await open(temporary, "w", 0o600);
  try {
    await file.writeFile(`${JSON.stringify(json, null, 2)}\n`);
    await file.sync();
  } finally {
    await file.close();
  }
  await rename(temporary, path);
}

/** Starts the witness on `port` (0: a free one). */
export async function startWitnessServer(options: WitnessServerOptions): Promise<RunningWitness> {
  let state = await readWitnessState(options.statePath);
  let queue: Promise<void> = Promise.resolve();
  const now = options.now ?? (() => Math.floor(Date.now() / 1000));
  const handle = async (body: string, res: ServerResponse): Promise<void> => {
    const answer = addCheckpoint(options.config, state, body, now(), nodeEngine, nodeSha256);
    if (answer.state !== undefined) {
      await writeWitnessState(options.statePath, answer.state);
      state = answer.state;
    }
    res.writeHead(answer.status, { "content-type": answer.contentType }).end(answer.body);
  };
  const server = createServer((req, res) => {
    if (req.method !== "POST" || req.url !== "/add-checkpoint") {
      res.writeHead(404, { "content-type": "text/plain; charset=utf-8" }).end("not found\n");
      return;
    }
    readBody(req, MAX_BODY).then(
      (body) => {
        // One request at a time: the check and the new state form one step, as the protocol requires.
        queue = queue.then(() =>
          handle(body, res).catch(() => {
            res.writeHead(500, { "content-type": "text/plain; charset=utf-8" }).end("state not saved\n");
          }),
        );
      },
      (status: number) =>
        res.writeHead(status, { "content-type": "text/plain; charset=utf-8" }).end("bad body\n"),
    );
  });
  server.requestTimeout = 10_000;
  await new Promise<void>((resolve) => server.listen(options.port, options.host ?? "127.0.0.1", resolve));
  const address = server.address() as AddressInfo;
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * The request body as UTF-8, or the status to refuse it with (413 too large, 400 not UTF-8). A body
 * over `max` is read on and dropped, so the client (which sends it whole before reading) gets the 413
 * rather than a reset connection; past 16 times `max` the connection is cut.
 */
function readBody(req: IncomingMessage, max: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let length = 0;
    req.on("data", (chunk: Buffer) => {
      length += chunk.length;
      if (length > 16 * max) {
        reject(413);
        req.destroy();
      } else if (length <= max) chunks.push(chunk);
    });
    req.on("end", () => {
      if (length > max) {
        reject(413);
        return;
      }
      try {
        resolve(new TextDecoder("utf-8", { fatal: true }).decode(Buffer.concat(chunks)));
      } catch {
        reject(400);
      }
    });
    req.on("error", () => reject(400));
  });
}
