import type { LookupAddress } from "node:dns";
import { createServer, type Server } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../src/domain/api-keys.js";
import { newEvent } from "../../src/domain/event-types.js";
import type { ResolveAll } from "../../src/events/ssrf.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { get, post, startService, type TestService } from "../support/harness.js";
import { FAST_EVENTS, REFUSED_URLS, until } from "./support.js";

/**
 * The SSRF corpus against a service outside development (RECEIPTS_ENV=test), as a stranger would try
 * it over the API: every spelling of a loopback, private, link-local or metadata address refused when
 * the endpoint is created, a name that resolves to one refused too, and a name that resolves to a
 * public address at creation and to loopback later (DNS rebinding) refused when the delivery connects,
 * with nothing ever reaching the listener on this machine.
 */

/** A resolver that answers by name; a name with several answers gives the next one each time. */
function dns(answers: Record<string, string[]>): ResolveAll {
  const asked = new Map<string, number>();
  return (hostname, callback) => {
    const rounds = answers[hostname];
    const n = asked.get(hostname) ?? 0;
    asked.set(hostname, n + 1);
    const address = rounds?.[Math.min(n, rounds.length - 1)];
    if (address === undefined) {
      const err: NodeJS.ErrnoException = new Error("not found");
      err.code = "ENOTFOUND";
      callback(err, []);
      return;
    }
    callback(null, [{ address, family: address.includes(":") ? 6 : 4 } as LookupAddress]);
  };
}

let svc: TestService;
let key: string;
let listener: Server;
let port = 0;
const connections: string[] = [];

beforeAll(async () => {
  // A plain TCP listener on this machine: any connection to it at all is a breach.
  listener = createServer((socket) => {
    connections.push(String(socket.remoteAddress));
    socket.destroy();
  });
  await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
  port = (listener.address() as { port: number }).port;
  const store = createMemoryStore();
  svc = await startService({
    store,
    env: { ...FAST_EVENTS, RECEIPTS_ENV: "test" },
    resolve: dns({
      "inside.example": ["127.0.0.1"],
      "metadata.example": ["169.254.169.254"],
      "ula.example": ["fd00:ec2::254"],
      // Public while the endpoint is created, loopback when the delivery connects.
      "rebind.example": ["93.184.216.34", "127.0.0.1"],
    }),
  });
  key = (
    await createApiKey(store, "test", { role: "issuer", tier: "standard", tenantId: "bank-t" }, new Date())
  ).key;
});
afterAll(async () => {
  await svc?.close();
  await new Promise<void>((resolve) => listener.close(() => resolve()));
});

describe("SSRF outside development", () => {
  it("refuses the whole corpus of URLs when the endpoint is created", async () => {
    const corpus = [
      ...REFUSED_URLS,
      `http://127.0.0.1:${port}/hooks`,
      `https://127.0.0.1:${port}/hooks`,
      `https://[::ffff:127.0.0.1]:${port}/hooks`,
      `https://2130706433:${port}/hooks`,
      `https://0x7f.1:${port}/hooks`,
    ];
    for (const url of corpus) {
      const res = await post(svc, "/api/v1/webhooks/endpoints", key, { url, events: ["*"] });
      expect(res.status, url).toBe(400);
      expect(res.body.error?.details, url).toMatch(/^url: /);
    }
  });

  it("refuses a name that resolves to a loopback, metadata or unique-local address", async () => {
    for (const host of ["inside.example", "metadata.example", "ula.example"]) {
      const res = await post(svc, "/api/v1/webhooks/endpoints", key, {
        url: `https://${host}:${port}/x`,
        events: ["*"],
      });
      expect(res.status, host).toBe(400);
      expect(res.body.error?.details).toBe(
        "url: resolves to a loopback, private, link-local or reserved address",
      );
    }
  });

  it("refuses at connect time a name that resolved to a public address when it was created (rebinding)", async () => {
    const created = await post(svc, "/api/v1/webhooks/endpoints", key, {
      url: `https://rebind.example:${port}/hooks`,
      events: ["*"],
    });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const endpointId = created.body.data.endpointId as string;
    await svc.store.events.append([newEvent("user.erased", "bank-t", new Date(), { userId: "usr_t" })]);
    const log = async () =>
      (await get(svc, `/api/v1/webhooks/deliveries?endpointId=${endpointId}`, key)).body.data.deliveries[0];
    await until(async () => (await log())?.attempts >= 2, 10_000, "two refused attempts");
    const delivery = await log();
    expect(delivery.attemptLog[0]).toMatchObject({ statusCode: 0, error: "address not allowed" });
    expect(delivery.status).toBe("pending");
    expect(connections).toEqual([]);
  });
});
