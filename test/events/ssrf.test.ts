import type { LookupAddress } from "node:dns";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { WebhookSender } from "../../src/events/sender.js";
import { checkWebhookUrl, guardedLookup, isPublicAddress, type ResolveAll } from "../../src/events/ssrf.js";
import { NOT_PUBLIC, REFUSED_URLS } from "./support.js";

const PUBLIC = [
  "8.8.8.8",
  "1.1.1.1",
  "93.184.216.34",
  "100.63.255.255",
  "100.128.0.1",
  "172.32.0.1",
  "2606:4700::1111",
  "2a00:1450:4001::200e",
  "::ffff:8.8.8.8",
  "64:ff9b::808:808",
];

describe("SSRF guard: which addresses are public", () => {
  it("refuses loopback, private, link-local, metadata, CGNAT, ULA, multicast, reserved and embedded forms", () => {
    for (const address of NOT_PUBLIC) expect(isPublicAddress(address), address).toBe(false);
  });

  it("allows public unicast addresses of both families", () => {
    for (const address of PUBLIC) expect(isPublicAddress(address), address).toBe(true);
  });

  it("refuses what is not an address at all", () => {
    for (const text of ["", "localhost", "1.2.3", "::gg", "1.2.3.4.5"])
      expect(isPublicAddress(text), text).toBe(false);
  });
});

describe("SSRF guard: webhook URLs outside development", () => {
  it("refuses the corpus: schemes, credentials, and every spelling of a non-public literal", () => {
    for (const url of REFUSED_URLS) expect(checkWebhookUrl(url, false).ok, url).toBe(false);
  });

  it("accepts https to a public literal or a name (names are checked when connecting)", () => {
    for (const url of [
      "https://hooks.example.com/receipts",
      "https://8.8.8.8/x",
      "https://[2606:4700::1111]:8443/x",
    ]) {
      expect(checkWebhookUrl(url, false).ok, url).toBe(true);
    }
  });

  it("allows http and private addresses in development only", () => {
    expect(checkWebhookUrl("http://127.0.0.1:9999/x", true).ok).toBe(true);
    expect(checkWebhookUrl("http://127.0.0.1:9999/x", false).ok).toBe(false);
  });
});

/** A resolver with fixed answers, changing per call when given several (DNS rebinding). */
function resolver(answers: Record<string, string[][]>): ResolveAll & { calls: string[] } {
  const calls: string[] = [];
  const fn = (
    hostname: string,
    callback: (err: NodeJS.ErrnoException | null, a: LookupAddress[]) => void,
  ) => {
    calls.push(hostname);
    const rounds = answers[hostname];
    const round =
      rounds?.[Math.min(calls.filter((c) => c === hostname).length - 1, (rounds?.length ?? 1) - 1)];
    if (round === undefined) {
      const err: NodeJS.ErrnoException = new Error("not found");
      err.code = "ENOTFOUND";
      callback(err, []);
      return;
    }
    callback(
      null,
      round.map((address) => ({ address, family: address.includes(":") ? 6 : 4 })),
    );
  };
  return Object.assign(fn, { calls });
}

describe("SSRF guard: at connect time", () => {
  it("refuses a name with any non-public address, and answers in the form asked for", async () => {
    const lookup = guardedLookup(
      resolver({ "mixed.test": [["8.8.8.8", "10.0.0.1"]], "good.test": [["8.8.8.8", "2606:4700::1111"]] }),
    );
    const ask = (host: string, all: boolean) =>
      new Promise<unknown>((resolve) =>
        lookup(host, { all } as never, (err: Error | null, address: unknown) => resolve(err ?? address)),
      );
    expect(await ask("mixed.test", false)).toBeInstanceOf(Error);
    expect(await ask("good.test", false)).toBe("8.8.8.8");
    expect(await ask("good.test", true)).toEqual([
      { address: "8.8.8.8", family: 4 },
      { address: "2606:4700::1111", family: 6 },
    ]);
  });
});

describe("the sender outside development", () => {
  let server: Server | undefined;
  const hits: string[] = [];
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
    server = undefined;
    hits.length = 0;
  });

  async function listen(handler: Parameters<typeof createServer>[1]): Promise<number> {
    server = createServer((req, res) => {
      hits.push(req.url ?? "");
      handler?.(req, res);
    });
    await new Promise<void>((r) => server?.listen(0, "127.0.0.1", r));
    return (server.address() as AddressInfo).port;
  }

  const send = (sender: WebhookSender, url: string) => sender.send({ url, headers: {}, body: "{}" });

  it("never connects to a name that resolves to a private address (rebinding included)", async () => {
    const port = await listen((_req, res) => res.writeHead(204).end());
    // Public at first (as when the endpoint was created), loopback when the delivery connects.
    const dns = resolver({ "rebind.test": [["8.8.8.8"], ["127.0.0.1"]], "inside.test": [["127.0.0.1"]] });
    const sender = new WebhookSender({
      allowPrivate: false,
      timeoutMs: 2_000,
      responseLimitBytes: 1024,
      resolve: dns,
    });
    await new Promise<void>((r) => dns("rebind.test", () => r()));
    // The URLs are http to reach the local listener; the address check runs before the scheme could matter.
    for (const host of ["inside.test", "rebind.test"]) {
      const result = await sender.send({ url: `https://${host}:${port}/x`, headers: {}, body: "{}" });
      expect(result, host).toMatchObject({ ok: false, statusCode: 0, error: "address not allowed" });
    }
    expect(hits).toEqual([]);
    sender.close();
  });

  it("refuses literals in every spelling without connecting", async () => {
    const port = await listen((_req, res) => res.writeHead(204).end());
    const sender = new WebhookSender({ allowPrivate: false, timeoutMs: 2_000, responseLimitBytes: 1024 });
    for (const host of ["127.0.0.1", "2130706433", "0177.0.0.1", "0x7f.1", "[::ffff:127.0.0.1]", "[::1]"]) {
      const result = await send(sender, `https://${host}:${port}/x`);
      expect(result.ok, host).toBe(false);
      expect(result.error, host).toBe("address not allowed");
    }
    expect(hits).toEqual([]);
    sender.close();
  });
});

describe("the sender in development (receivers on this machine)", () => {
  let server: Server | undefined;
  const hits: string[] = [];
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
    hits.length = 0;
  });

  async function listen(handler: Parameters<typeof createServer>[1]): Promise<string> {
    server = createServer((req, res) => {
      hits.push(req.url ?? "");
      handler?.(req, res);
    });
    await new Promise<void>((r) => server?.listen(0, "127.0.0.1", r));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  const sender = () => new WebhookSender({ allowPrivate: true, timeoutMs: 300, responseLimitBytes: 1024 });

  it("does not follow a redirect: the attempt fails and the target is never called", async () => {
    const base = await listen((req, res) => {
      if (req.url === "/hooks") res.writeHead(302, { location: "/internal" }).end();
      else res.writeHead(204).end();
    });
    const s = sender();
    expect(await s.send({ url: `${base}/hooks`, headers: {}, body: "{}" })).toMatchObject({
      ok: false,
      statusCode: 302,
      error: "redirect not followed",
    });
    expect(hits).toEqual(["/hooks"]);
    s.close();
  });

  it("gives up on a receiver that does not answer in time", async () => {
    const base = await listen(() => undefined);
    const s = sender();
    const result = await s.send({ url: `${base}/slow`, headers: {}, body: "{}" });
    expect(result).toMatchObject({ ok: false, statusCode: 0, error: "timeout" });
    expect(result.durationMs).toBeLessThan(2_000);
    s.close();
  });

  it("reads at most the response limit of an answer, and takes 410 as a request to stop", async () => {
    const base = await listen((req, res) => {
      if (req.url === "/gone") res.writeHead(410).end();
      else {
        res.writeHead(200);
        const chunk = Buffer.alloc(64 * 1024, 97);
        // An endless body: the sender must stop reading it.
        const write = () => {
          while (res.write(chunk)) {
            if (res.destroyed) return;
          }
          res.once("drain", write);
        };
        write();
      }
    });
    const s = sender();
    expect(await s.send({ url: `${base}/big`, headers: {}, body: "{}" })).toMatchObject({
      ok: true,
      statusCode: 200,
    });
    expect(await s.send({ url: `${base}/gone`, headers: {}, body: "{}" })).toMatchObject({
      ok: false,
      gone: true,
      error: "HTTP 410",
    });
    s.close();
  });
});
