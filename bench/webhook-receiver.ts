import { type ChildProcess, fork } from "node:child_process";
import { createServer, type Socket } from "node:net";
import { fileURLToPath } from "node:url";

/**
 * The bench's webhook receiver, in a process of its own (so that its CPU time is measured apart from
 * the service's and the load generator's), and as cheap as an HTTP/1.1 receiver gets: a raw TCP
 * server that frames each request by its `Content-Length` (pipelined requests too), takes the
 * `webhook-id` header and the event's `"timestamp"` from the body, and answers `204 No Content` on the
 * kept-alive connection; anything it cannot frame (no `POST ... HTTP/1.1`, no `Content-Length`, a
 * `Transfer-Encoding`, no `webhook-id`, a head over 16 KiB) gets a 400 and the connection closed. It
 * does not verify signatures (test/events does, with the `standardwebhooks` package): a receiver
 * elsewhere costs this machine nothing, and one here should cost it as little as possible. Per event
 * id, the first arrival is kept: when it arrived, and that less the event's own time; repeats
 * (at-least-once) are counted apart.
 */

const MAX_HEAD = 16 * 1024;
const NO_CONTENT = "HTTP/1.1 204 No Content\r\n\r\n";
const BAD = "HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/** What the parent asks, and what the child answers. */
type Ask = { ask: "count" } | { ask: "last" } | { ask: "dump" };
interface Stats {
  count: number;
  repeats: number;
  rejected: number;
  /** The latest first arrival (ms since the epoch), 0 before any. */
  last: number;
  /** `dump` only: [id, latency ms, arrived at] per event. */
  events?: [string, number, number][];
}

function serve(): void {
  const events = new Map<string, [number, number]>();
  let [repeats, rejected, last] = [0, 0, 0];
  const onRequest = (id: string, body: string): void => {
    if (events.has(id)) {
      repeats++;
      return;
    }
    const arrived = Date.now();
    const at = body.indexOf('"timestamp":"');
    const stamp = at < 0 ? Number.NaN : Date.parse(body.slice(at + 13, body.indexOf('"', at + 13)));
    events.set(id, [arrived - stamp, arrived]);
    last = arrived;
  };
  const server = createServer((socket: Socket) => {
    let pending: Buffer = Buffer.alloc(0);
    socket.setNoDelay(true);
    socket.on("error", () => socket.destroy());
    socket.on("data", (chunk: Buffer) => {
      let buf = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      let out = "";
      for (;;) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) {
          if (buf.length > MAX_HEAD) return refuse();
          break;
        }
        const head = buf.toString("latin1", 0, end);
        const length = /\r\ncontent-length: *(\d+) *(?:\r|$)/i.exec(head)?.[1];
        const id = /\r\nwebhook-id: *([^\r]+)/i.exec(head)?.[1];
        if (
          end > MAX_HEAD ||
          !/^POST \S+ HTTP\/1\.1$/.test(head.slice(0, head.indexOf("\r\n"))) ||
          length === undefined ||
          id === undefined ||
          /\r\ntransfer-encoding:/i.test(head)
        ) {
          return refuse();
        }
        const stop = end + 4 + Number(length);
        if (buf.length < stop) break;
        onRequest(id.trim(), buf.toString("utf8", end + 4, stop));
        out += NO_CONTENT;
        buf = buf.subarray(stop);
      }
      pending = buf;
      if (out !== "") socket.write(out);
    });
    const refuse = () => {
      rejected++;
      socket.end(BAD);
    };
  });
  server.listen(0, "127.0.0.1", () => {
    const address = server.address();
    process.send?.({ port: typeof address === "object" && address !== null ? address.port : 0 });
  });
  process.on("message", (m: Ask) => {
    const stats: Stats = { count: events.size, repeats, rejected, last };
    if (m.ask === "dump") stats.events = [...events].map(([id, [ms, at]]) => [id, ms, at]);
    process.send?.(stats);
  });
  process.on("disconnect", () => process.exit(0));
}

/** The parent's handle on a receiver process. */
export interface ReceiverProcess {
  url: string;
  pid: number;
  /** Events that arrived so far (each id once). */
  count(): Promise<number>;
  /** When the latest event arrived first (ms since the epoch). */
  last(): Promise<number>;
  /** Everything it saw: per event id, its delivery latency (ms) and arrival time. */
  dump(): Promise<Required<Stats>>;
  close(): void;
}

/** Starts a receiver process (this file, run by `fork`) and waits until it listens. */
export async function startReceiverProcess(): Promise<ReceiverProcess> {
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), ["--serve"], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const replies: ((s: Stats) => void)[] = [];
  const port = await new Promise<number>((resolve, reject) => {
    child.once("message", (m: { port: number }) => resolve(m.port));
    child.once("exit", () => reject(new Error("the webhook receiver exited")));
  });
  child.on("message", (m: Stats) => replies.shift()?.(m));
  // Answers come back in the order asked (one channel, one process).
  const ask = (m: Ask) =>
    new Promise<Stats>((resolve) => {
      replies.push(resolve);
      child.send(m);
    });
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    pid: child.pid as number,
    count: async () => (await ask({ ask: "count" })).count,
    last: async () => (await ask({ ask: "last" })).last,
    dump: async () => (await ask({ ask: "dump" })) as Required<Stats>,
    close: () => child.disconnect(),
  };
}

if (process.argv.includes("--serve")) serve();
