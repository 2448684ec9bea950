import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/** One webhook a receiver got: its headers and the body exactly as sent. */
export interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

/** A webhook receiver on 127.0.0.1, port 0: records every request and answers as told. */
export interface Receiver {
  url: string;
  port: number;
  received: Received[];
  /** The status to answer the n-th request with (0-based); 204 by default. */
  answer: (n: number, received: Received) => number | Promise<number>;
  /** Requests refused at the connection (the receiver was "down"), counted. */
  close(): Promise<void>;
  server: Server;
}

export async function startReceiver(path = "/hooks"): Promise<Receiver> {
  const receiver: Receiver = {
    url: "",
    port: 0,
    received: [],
    answer: () => 204,
    close: async () => {
      receiver.server.closeAllConnections();
      await new Promise<void>((resolve) => receiver.server.close(() => resolve()));
    },
    server: createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", async () => {
        const got: Received = {
          headers: req.headers,
          body: Buffer.concat(chunks).toString("utf8"),
          at: Date.now(),
        };
        const n = receiver.received.length;
        receiver.received.push(got);
        const status = await receiver.answer(n, got);
        if (!res.destroyed) res.writeHead(status).end();
      });
    }),
  };
  await new Promise<void>((resolve) => receiver.server.listen(0, "127.0.0.1", resolve));
  receiver.port = (receiver.server.address() as AddressInfo).port;
  receiver.url = `http://127.0.0.1:${receiver.port}${path}`;
  return receiver;
}

/** Polls `check` every 10 ms until it returns true, or fails after `ms`. */
export async function until(
  check: () => boolean | Promise<boolean>,
  ms = 10_000,
  what = "condition",
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Settings that make delivery fast enough for tests: the retry schedule compressed to milliseconds. */
export const FAST_EVENTS: NodeJS.ProcessEnv = {
  EVENTS_POLL_MS: "20",
  EVENTS_LEASE_MS: "900",
  WEBHOOK_RETRY_SCHEDULE: "30ms,30ms,30ms,30ms,30ms",
  WEBHOOK_TIMEOUT_MS: "2000",
};
