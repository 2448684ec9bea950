import { BlockList, isIP } from "node:net";

/**
 * The networks of trusted proxies (`TRUSTED_PROXIES`), read by the configuration at start-up. The
 * transport reads `X-Forwarded-For` only from a peer in this list (src/http/client-address.ts).
 */

/** A parsed list of trusted proxy networks. */
export interface TrustedProxies {
  /** Whether `address` (IPv4, IPv6 or IPv4-mapped IPv6) is a trusted proxy. */
  has(address: string): boolean;
  /** How many networks the list holds; 0 means X-Forwarded-For is never read. */
  readonly size: number;
}

/**
 * Parses a comma-separated CIDR list (`10.0.0.0/8, 2001:db8::/32, 192.0.2.7`; a bare address is a
 * single host). Returns the list and one problem per bad entry, naming it.
 */
export function parseTrustedProxies(raw: string | undefined): {
  proxies: TrustedProxies;
  problems: string[];
} {
  const list = new BlockList();
  const problems: string[] = [];
  let size = 0;
  for (const entry of (raw ?? "").split(",")) {
    const text = entry.trim();
    if (text === "") continue;
    const [address = "", prefix, extra] = text.split("/");
    const family = isIP(address);
    const max = family === 4 ? 32 : 128;
    const bits = prefix === undefined ? max : /^\d{1,3}$/.test(prefix) ? Number(prefix) : Number.NaN;
    if (family === 0 || extra !== undefined || !(bits >= 0 && bits <= max)) {
      problems.push(`TRUSTED_PROXIES: "${text}" is not an IPv4 or IPv6 address or CIDR network`);
      continue;
    }
    list.addSubnet(address, bits, family === 4 ? "ipv4" : "ipv6");
    size++;
  }
  const has = (address: string): boolean => {
    const plain = withoutIpv4Prefix(address);
    const family = isIP(plain);
    if (family === 0) return false;
    return list.check(plain, family === 4 ? "ipv4" : "ipv6");
  };
  return { proxies: { has, size }, problems };
}

/** No trusted proxies: the peer's address is always the client's. */
export const NO_TRUSTED_PROXIES: TrustedProxies = { has: () => false, size: 0 };

/** An address without the `::ffff:` prefix of IPv4 clients on a dual-stack socket. */
export function withoutIpv4Prefix(address: string): string {
  return address.startsWith("::ffff:") ? address.slice(7) : address;
}
