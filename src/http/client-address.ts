import { isIP } from "node:net";
import { type TrustedProxies, withoutIpv4Prefix } from "../trusted-proxies.js";

/**
 * The caller's address behind trusted proxies (`TRUSTED_PROXIES`): the peer's address, unless the
 * peer is a trusted proxy, in which case `X-Forwarded-For` is read from the right (each proxy appends
 * the address it received from) and the first address that is not a trusted proxy is the client.
 * An address a client wrote itself is left of its first proxy's entry, so it is never taken unless
 * every hop to its right is trusted. Without trusted proxies, the peer's address, as always.
 *
 * This address is what the per-IP rate limit of unauthenticated callers counts, and what grants and
 * the audit log record as `sourceIp`.
 */

/**
 * The client's address for a request from `peer` carrying `forwardedFor` (the `X-Forwarded-For`
 * header or headers), without the `::ffff:` prefix of IPv4 peers on a dual-stack socket.
 */
export function clientAddressOf(
  peer: string,
  forwardedFor: string | string[] | undefined,
  proxies: TrustedProxies,
): string {
  let client = withoutIpv4Prefix(peer);
  if (proxies.size === 0 || forwardedFor === undefined || !proxies.has(client)) return client;
  const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(",") : forwardedFor).split(",");
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = withoutIpv4Prefix((hops[i] as string).trim());
    // A hop that is not an address: nothing left of it can be trusted; the last trusted hop stands.
    if (isIP(hop) === 0) return client;
    client = hop;
    if (!proxies.has(hop)) return hop;
  }
  return client;
}
