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

/** Addresses no webhook may reach outside development. */
export const NOT_PUBLIC = [
  "0.0.0.0",
  "0.1.2.3",
  "10.0.0.1",
  "100.64.0.1",
  "100.127.255.254",
  "127.0.0.1",
  "127.255.255.255",
  "169.254.169.254",
  "169.254.0.1",
  "172.16.0.1",
  "172.31.255.255",
  "192.0.0.8",
  "192.0.2.1",
  "192.168.1.1",
  "198.18.0.1",
  "198.51.100.7",
  "203.0.113.9",
  "224.0.0.1",
  "239.255.255.250",
  "240.0.0.1",
  "255.255.255.255",
  "::",
  "::1",
  "::ffff:127.0.0.1",
  "::ffff:7f00:1",
  "::ffff:10.0.0.1",
  "::ffff:169.254.169.254",
  "::127.0.0.1",
  "64:ff9b::a9fe:a9fe",
  "fe80::1",
  "fe80::1%lo",
  "fc00::1",
  "fd00:ec2::254",
  "ff02::1",
  "2001:db8::1",
  "2001::1",
  "2002:7f00:1::1",
  "3fff::1",
  "100::1",
];

/** Webhook URLs refused outside development: schemes, credentials, every spelling of a private literal. */
export const REFUSED_URLS = [
  "http://hooks.example.com/x",
  "ftp://hooks.example.com/x",
  "https://user:pass@hooks.example.com/x",
  "https://127.0.0.1/x",
  "https://2130706433/x",
  "https://0177.0.0.1/x",
  "https://0x7f.0.0.1/x",
  "https://0x7f000001/x",
  "https://127.1/x",
  "https://[::1]/x",
  "https://[::ffff:127.0.0.1]/x",
  "https://[::ffff:a9fe:a9fe]/latest/meta-data",
  "https://169.254.169.254/latest/meta-data",
  "https://[fd00:ec2::254]/latest/meta-data",
  "https://100.100.100.200/x",
  "https://10.1.2.3:8443/x",
  "https://[fe80::1]/x",
  "https://0.0.0.0/x",
  "not a url",
  `https://hooks.example.com/${"a".repeat(2_100)}`,
];

/**
 * A view of `store` that can be frozen, standing in for the store as a killed process sees it: after
 * `freeze()` no call of the frozen view ever settles, so the instance writes nothing more; `unfreeze`
 * lets new calls through again, and `abandon()` rejects the calls left hanging (test teardown).
 */
export function freezableStore<T extends object>(
  store: T,
): { store: T; freeze(): void; unfreeze(): void; abandon(): void } {
  let frozen = false;
  const hanging: ((err: Error) => void)[] = [];
  const wrapped = Object.fromEntries(
    Object.entries(store).map(([name, member]) => {
      if (typeof member !== "object" || member === null) return [name, member];
      const repository = member as Record<string, unknown>;
      return [
        name,
        new Proxy(repository, {
          get(target, property, receiver) {
            const value = Reflect.get(target, property, receiver);
            if (typeof value !== "function") return value;
            return (...args: unknown[]) =>
              frozen
                ? new Promise((_resolve, reject) => hanging.push(reject))
                : (value as (...a: unknown[]) => unknown).apply(target, args);
          },
        }),
      ];
    }),
  ) as T;
  for (const name of ["init", "ping", "close"] as const) {
    const fn = (store as Record<string, unknown>)[name];
    if (typeof fn === "function") (wrapped as Record<string, unknown>)[name] = () => Promise.resolve();
  }
  return {
    store: Object.assign(wrapped, { kind: (store as { kind?: string }).kind }),
    freeze: () => {
      frozen = true;
    },
    unfreeze: () => {
      frozen = false;
    },
    abandon: () => {
      for (const reject of hanging.splice(0)) reject(new Error("the instance was killed"));
    },
  };
}
