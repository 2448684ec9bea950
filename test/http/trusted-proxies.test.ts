import { Metadata } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { ConfigError, loadConfig } from "../../src/config.js";
import { clientAddressOf } from "../../src/http/client-address.js";
import { parseTrustedProxies } from "../../src/trusted-proxies.js";
import { onboard } from "../hardening/support.js";
import { minuteStartClock } from "../support/clock.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import { startService, type TestService } from "../support/harness.js";

/**
 * Behind a load balancer every caller's connection comes from the balancer: without TRUSTED_PROXIES
 * all unauthenticated callers shared one rate-limit bucket and grants recorded the balancer's
 * address. X-Forwarded-For is believed only from a trusted proxy, read from the right.
 */

describe("clientAddressOf", () => {
  const { proxies } = parseTrustedProxies("10.0.0.0/8, 2001:db8::/32, 192.0.2.7");

  it("takes the right-most address that is not a trusted proxy, from a trusted peer only", () => {
    expect(clientAddressOf("10.1.2.3", "198.51.100.7", proxies)).toBe("198.51.100.7");
    expect(clientAddressOf("::ffff:10.1.2.3", "198.51.100.7, 10.9.9.9", proxies)).toBe("198.51.100.7");
    // What a client writes itself is left of the first proxy's entry: not taken.
    expect(clientAddressOf("10.1.2.3", "1.2.3.4, 198.51.100.7, 192.0.2.7", proxies)).toBe("198.51.100.7");
    expect(clientAddressOf("2001:db8::1", "2001:db8::5, 2a00::1", proxies)).toBe("2a00::1");
    expect(clientAddressOf("10.1.2.3", ["198.51.100.7", "10.0.0.2"], proxies)).toBe("198.51.100.7");
    // An untrusted peer: its header is ignored.
    expect(clientAddressOf("203.0.113.9", "198.51.100.7", proxies)).toBe("203.0.113.9");
    // A hop that is not an address: the last trusted hop stands.
    expect(clientAddressOf("10.1.2.3", "198.51.100.7, junk", proxies)).toBe("10.1.2.3");
    expect(clientAddressOf("10.1.2.3", undefined, proxies)).toBe("10.1.2.3");
  });

  it("is validated at start-up, naming each bad entry", () => {
    expect(loadConfig({ TRUSTED_PROXIES: "10.0.0.0/8,::1" }).trustedProxies.size).toBe(2);
    expect(loadConfig({}).trustedProxies.size).toBe(0);
    try {
      loadConfig({ TRUSTED_PROXIES: "10.0.0.0/33, lb.internal, 10.0.0.1/8/2, 2001:db8::/129" });
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      const problems = (err as ConfigError).problems.join("\n");
      for (const entry of ["10.0.0.0/33", "lb.internal", "10.0.0.1/8/2", "2001:db8::/129"]) {
        expect(problems).toContain(
          `TRUSTED_PROXIES: "${entry}" is not an IPv4 or IPv6 address or CIDR network`,
        );
      }
    }
  });
});

/** Three requests per minute per unauthenticated caller, so buckets show in the headers. */
const TIERS = JSON.stringify({ sandbox: { requestsPerMinute: 3, generateKeysPerMinute: 3 } });

/** `x-ratelimit-remaining` of an unauthenticated REST call claiming to come from `forwardedFor`. */
async function remainingFor(svc: TestService, forwardedFor: string): Promise<string | null> {
  const res = await fetch(`${svc.baseUrl}/api/v1/receipts/usr_nobody`, {
    headers: { "x-forwarded-for": forwardedFor },
  });
  expect(res.status).toBe(401);
  return res.headers.get("x-ratelimit-remaining");
}

describe("X-Forwarded-For from a trusted proxy", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService({
      clock: minuteStartClock(),
      env: { TRUSTED_PROXIES: "127.0.0.0/8", RATE_LIMIT_TIERS: TIERS },
    });
  });
  afterAll(async () => {
    await svc.close();
  });

  it("gives two callers behind the proxy separate rate-limit buckets", async () => {
    expect(await remainingFor(svc, "198.51.100.1")).toBe("2");
    expect(await remainingFor(svc, "198.51.100.1")).toBe("1");
    expect(await remainingFor(svc, "198.51.100.2")).toBe("2");
    expect(await remainingFor(svc, "198.51.100.1")).toBe("0");
    expect(await remainingFor(svc, "198.51.100.2")).toBe("1");
  });

  it("records the forwarded address as the grant's sourceIp, over REST and gRPC", async () => {
    const holder = await onboard(svc, "4000000000000002");
    const res = await fetch(`${svc.baseUrl}/api/v1/keys/grant-access`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-api-key": svc.issuerKey,
        "x-forwarded-for": "6.6.6.6, 198.51.100.7",
      },
      body: JSON.stringify({ userId: holder.userId, keyId: holder.keyId }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: { sourceIp: string } }).data.sourceIp).toBe("198.51.100.7");

    const client = grpcClient(KeysService, svc.port);
    try {
      const metadata = new Metadata();
      metadata.set("x-api-key", svc.issuerKey);
      metadata.set("x-forwarded-for", "2001:db8::77");
      const result = await grpcUnary<{ sourceIp: string }>(
        client,
        "grantAccess",
        { userId: holder.userId, keyId: holder.keyId },
        metadata,
      );
      expect(result.error).toBeUndefined();
      expect(result.response?.sourceIp).toBe("2001:db8::77");
    } finally {
      client.close();
    }
  });
});

describe("X-Forwarded-For from a peer that is not a trusted proxy", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService({
      clock: minuteStartClock(),
      env: { TRUSTED_PROXIES: "10.0.0.0/8", RATE_LIMIT_TIERS: TIERS },
    });
  });
  afterAll(async () => {
    await svc.close();
  });

  it("is ignored: every caller from that peer shares its bucket", async () => {
    expect(await remainingFor(svc, "198.51.100.1")).toBe("2");
    expect(await remainingFor(svc, "198.51.100.2")).toBe("1");
    expect(await remainingFor(svc, "198.51.100.3")).toBe("0");
  });
});
