import type { LookupAddress } from "node:dns";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { WebhookSender } from "../../src/events/sender.js";
import {
  AddressNotAllowedError,
  checkWebhookUrl,
  guardedLookup,
  isPublicAddress,
  type ResolveAll,
  systemResolver,
} from "../../src/events/ssrf.js";
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
    // "::ffff:08.8.8.8": a leading zero makes it no address, though it reads as a mapped public one.
    for (const text of ["", "localhost", "1.2.3", "::gg", "1.2.3.4.5", "::ffff:08.8.8.8"])
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

describe("SSRF guard: the edges an attacker probes", () => {
  it("refuses the 6to4 relay anycast range and the first and last address of each refused IPv4 range", () => {
    const edges = [
      ["0.0.0.0", "0.255.255.255"],
      ["10.0.0.0", "10.255.255.255"],
      ["100.64.0.0", "100.127.255.255"],
      ["127.0.0.0", "127.255.255.255"],
      ["169.254.0.0", "169.254.255.255"],
      ["172.16.0.0", "172.31.255.255"],
      ["192.0.0.0", "192.0.0.255"],
      ["192.0.2.0", "192.0.2.255"],
      ["192.88.99.0", "192.88.99.255"],
      ["192.168.0.0", "192.168.255.255"],
      ["198.18.0.0", "198.19.255.255"],
      ["198.51.100.0", "198.51.100.255"],
      ["203.0.113.0", "203.0.113.255"],
      ["224.0.0.0", "239.255.255.255"],
      ["240.0.0.0", "255.255.255.255"],
    ].flat();
    for (const address of edges) expect(isPublicAddress(address), address).toBe(false);
    // Just outside each range: public.
    const outside = [
      "1.0.0.0",
      "9.255.255.255",
      "11.0.0.0",
      "100.63.255.255",
      "100.128.0.0",
      "126.255.255.255",
      "128.0.0.0",
      "169.253.255.255",
      "169.255.0.0",
      "172.15.255.255",
      "172.32.0.0",
      "192.0.1.0",
      "192.0.3.0",
      "192.88.98.255",
      "192.88.100.0",
      "192.167.255.255",
      "192.169.0.0",
      "198.17.255.255",
      "198.20.0.0",
      "198.51.99.255",
      "198.51.101.0",
      "203.0.112.255",
      "203.0.114.0",
      "223.255.255.255",
    ];
    for (const address of outside) expect(isPublicAddress(address), address).toBe(true);
  });

  it("reads every IPv6 spelling of a public address as public, and of a private one as private", () => {
    const publicForms = [
      "2A00:1450:4001::200E", // upper-case hex
      "2606:4700:4700::", // ends in ::
      "2606:4700::1111%eth0", // a zone id does not change the address
      "::ffff:200.1.1.1", // mapped, first bit of the IPv4 address set
      "::ffff:200.100.10.100", // octets of several digits
      "2a00:1450:4001:81c:0:0:0:200e", // all eight groups, no ::
      "::FFFF:8.8.8.8",
      "64:ff9b::200.1.1.1",
      "3001:db8::1", // 2000::/3 is wider than 2000::/4
      "2001:200::1", // just outside 2001::/23
      "2001:db9::1", // just outside 2001:db8::/32
      "2003::1", // just outside 2002::/16
      "3ffe:f000::1", // just outside 3fff::/20
    ];
    for (const address of publicForms) expect(isPublicAddress(address), address).toBe(true);
    const privateForms = [
      "::ffff:192.168.0.1",
      "::ffff:c0a8:1",
      "64:ff9b::10.0.0.1",
      "64:ff9b::7f00:1",
      "2001:1ff:ffff::1", // last of 2001::/23
      "2001:db8:ffff::1",
      "2002:808:808::1", // 6to4, whatever the IPv4 address
      "3fff:fff::1",
      "1fff:ffff::1", // just below 2000::/3
      "4000::1", // just above 3fff::/16
      "fe80::1%eth0",
    ];
    for (const address of privateForms) expect(isPublicAddress(address), address).toBe(false);
  });

  it("refuses a URL one character too long and accepts one of exactly the limit", () => {
    const at = (n: number) => {
      const prefix = "https://hooks.example.com/";
      return prefix + "a".repeat(n - prefix.length);
    };
    expect(checkWebhookUrl(at(2_048), false).ok).toBe(true);
    expect(checkWebhookUrl(at(2_049), false)).toEqual({
      ok: false,
      reason: "must be at most 2048 characters",
    });
  });

  it("refuses every control character and space the URL parser would drop or encode", () => {
    const refused: string[] = [];
    for (const code of [0, 1, 9, 10, 13, 31, 32, 127]) {
      const c = String.fromCharCode(code);
      for (const url of [
        `${c}https://hooks.example.com/x`,
        `https://hooks.exa${c}mple.com/x`,
        `https://hooks.example.com/x${c}`,
      ]) {
        const check = checkWebhookUrl(url, false);
        if (check.ok || check.reason !== "must not contain spaces or control characters")
          refused.push(`${code}`);
      }
    }
    expect(refused).toEqual([]);
    expect(checkWebhookUrl("https://hooks.example.com/~x!", false).ok).toBe(true);
  });

  it("says why a URL is refused, and marks only a refused address as one", () => {
    const why = (url: string, allowPrivate = false) => checkWebhookUrl(url, allowPrivate);
    expect(why("hooks.example.com/x")).toEqual({ ok: false, reason: "is not an absolute URL" });
    expect(why("http://hooks.example.com/x")).toEqual({ ok: false, reason: "must be an https URL" });
    expect(why("ftp://hooks.example.com/x", true)).toEqual({
      ok: false,
      reason: "must be an http or https URL",
    });
    expect(why("https://user@hooks.example.com/x")).toEqual({
      ok: false,
      reason: "must not carry credentials",
    });
    expect(why("https://:pass@hooks.example.com/x")).toEqual({
      ok: false,
      reason: "must not carry credentials",
    });
    expect(why("https://[fd00:ec2::254]/x")).toEqual({
      ok: false,
      reason: "must not point at a loopback, private, link-local or reserved address",
      address: true,
    });
    // In development: both schemes, and private literals.
    expect(why("https://127.0.0.1/x", true).ok).toBe(true);
    expect(why("http://[::1]:8080/x", true).ok).toBe(true);
    const accepted = why("https://[2606:4700::1111]/x");
    expect(accepted.ok && accepted.url.href).toBe("https://[2606:4700::1111]/x");
  });
});

/** Asks a guarded lookup as `net.connect` would, with `options`. */
function askGuarded(resolve: ResolveAll, host: string, options: { all?: boolean; family?: number }) {
  return new Promise<{ err: NodeJS.ErrnoException | null; address: unknown; family: unknown }>((done) =>
    guardedLookup(resolve)(
      host,
      options as never,
      (err: NodeJS.ErrnoException | null, address: unknown, family?: unknown) =>
        done({ err, address, family }),
    ),
  );
}

describe("SSRF guard: the connect-time lookup", () => {
  const dns = resolver({
    "dual.test": [["2606:4700::1111", "8.8.8.8"]],
    "v4.test": [["8.8.8.8"]],
    "split.test": [["8.8.8.8", "fd00::1"]],
  });

  it("answers the family asked for, and the first public address with its family", async () => {
    expect(await askGuarded(dns, "dual.test", {})).toMatchObject({
      err: null,
      address: "2606:4700::1111",
      family: 6,
    });
    expect(await askGuarded(dns, "dual.test", { family: 4 })).toMatchObject({
      address: "8.8.8.8",
      family: 4,
    });
    expect(await askGuarded(dns, "dual.test", { family: 6, all: true })).toMatchObject({
      address: [{ address: "2606:4700::1111", family: 6 }],
    });
    expect((await askGuarded(dns, "dual.test", { all: true })).address).toHaveLength(2);
  });

  it("refuses a name with a private address of the family not asked for (the socket could still get it)", async () => {
    const { err } = await askGuarded(dns, "split.test", { family: 4 });
    expect(err).toBeInstanceOf(AddressNotAllowedError);
    expect(err?.name).toBe("AddressNotAllowedError");
    expect(err?.code).toBe("ERR_WEBHOOK_ADDRESS_NOT_ALLOWED");
    expect(err?.message).toBe("address not allowed");
  });

  it("passes the resolver's error on, and says ENOTFOUND when no address has the family asked for", async () => {
    expect((await askGuarded(dns, "nowhere.test", {})).err?.code).toBe("ENOTFOUND");
    const failing: ResolveAll = (_host, callback) =>
      callback(Object.assign(new Error("server failure"), { code: "ESERVFAIL" }), []);
    expect(await askGuarded(failing, "any.test", {})).toMatchObject({
      err: { code: "ESERVFAIL" },
      address: "",
    });
    expect((await askGuarded(dns, "split.test", {})).address).toBe("");
    const { err, address } = await askGuarded(dns, "v4.test", { family: 6 });
    expect(err?.code).toBe("ENOTFOUND");
    expect(err?.message).toBe("no address for v4.test");
    expect(address).toBe("");
  });

  it("asks the system resolver for every address", async () => {
    const found = await new Promise<unknown>((done) => systemResolver("localhost", (_err, a) => done(a)));
    expect(Array.isArray(found)).toBe(true);
  });
});
