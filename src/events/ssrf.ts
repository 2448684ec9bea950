import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { isIP, type LookupFunction } from "node:net";

/**
 * The guard against server-side request forgery (docs/events.md): a webhook URL is the customer's to
 * choose, and the service must never be made to call into its own network. Outside development:
 * - a URL must be https, without credentials, at most 2,048 characters;
 * - every address its host resolves to must be public: not loopback, private (RFC 1918, ULA),
 *   link-local (so not the cloud metadata services 169.254.169.254 and fd00:ec2::254), CGNAT
 *   (100.64.0.0/10), multicast, reserved, documentation, benchmarking, 0.0.0.0/8, nor an IPv6 form
 *   that embeds a private IPv4 address (IPv4-mapped, NAT64, 6to4, Teredo);
 * - the check runs when the connection is made, on the addresses that connection uses (a custom
 *   `lookup` for names, the address itself for literals, and the socket's peer address after it
 *   connects), so a name that resolves to a public address when the endpoint is created and to a
 *   private one later (DNS rebinding) is refused;
 * - redirects are never followed (sender.ts).
 * The URL parser (WHATWG) turns the other spellings of an IPv4 address (decimal `2130706433`, octal
 * `0177.0.0.1`, hexadecimal `0x7f.1`) into the dotted form before the check.
 */

/** IPv4 networks that are not public, as [first address, prefix length]. */
const IPV4_NOT_PUBLIC: readonly [string, number][] = [
  ["0.0.0.0", 8], // "this network"
  ["10.0.0.0", 8], // private
  ["100.64.0.0", 10], // carrier-grade NAT
  ["127.0.0.0", 8], // loopback
  ["169.254.0.0", 16], // link-local, cloud metadata (169.254.169.254)
  ["172.16.0.0", 12], // private
  ["192.0.0.0", 24], // IETF protocol assignments
  ["192.0.2.0", 24], // documentation
  ["192.88.99.0", 24], // 6to4 relay anycast
  ["192.168.0.0", 16], // private
  ["198.18.0.0", 15], // benchmarking
  ["198.51.100.0", 24], // documentation
  ["203.0.113.0", 24], // documentation
  ["224.0.0.0", 4], // multicast
  ["240.0.0.0", 4], // reserved, broadcast
];

const IPV4_RANGES = IPV4_NOT_PUBLIC.map(([base, bits]) => ({
  base: ipv4ToInt(base),
  mask: bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0,
}));

function ipv4ToInt(address: string): number {
  return address.split(".").reduce((n, octet) => ((n << 8) | Number(octet)) >>> 0, 0);
}

/** Whether a dotted IPv4 address is public. */
function isPublicIPv4(address: string): boolean {
  const n = ipv4ToInt(address);
  return !IPV4_RANGES.some(({ base, mask }) => (n & mask) >>> 0 === base);
}

/** The 16 bytes of an IPv6 address (zone id removed), or undefined when it does not parse. */
function ipv6Bytes(text: string): number[] | undefined {
  let address = text.split("%")[0] ?? "";
  const tail: number[] = [];
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(address);
  if (dotted !== null) {
    const v4 = ipv4ToInt(dotted[1] as string);
    tail.push(v4 >>> 24, (v4 >>> 16) & 0xff, (v4 >>> 8) & 0xff, v4 & 0xff);
    address = `${address.slice(0, dotted.index)}0:0`;
  }
  const halves = address.split("::");
  if (halves.length > 2) return undefined;
  const groups = (part: string) => (part === "" ? [] : part.split(":"));
  const head = groups(halves[0] ?? "");
  const rest = halves.length === 2 ? groups(halves[1] ?? "") : [];
  const missing = 8 - head.length - rest.length;
  if (missing < 0 || (halves.length === 1 && missing !== 0)) return undefined;
  const all = [...head, ...Array<string>(missing).fill("0"), ...rest];
  const bytes: number[] = [];
  for (const group of all) {
    if (!/^[0-9a-f]{1,4}$/i.test(group)) return undefined;
    const value = Number.parseInt(group, 16);
    bytes.push(value >> 8, value & 0xff);
  }
  if (tail.length === 4) bytes.splice(12, 4, ...tail);
  return bytes;
}

/** Whether the first `bits` bits of `bytes` equal those of `prefix`. */
function inPrefix(bytes: readonly number[], prefix: readonly number[], bits: number): boolean {
  for (let i = 0; i < bits; i++) {
    const byte = i >> 3;
    const mask = 0x80 >> (i & 7);
    if (((bytes[byte] ?? 0) & mask) !== ((prefix[byte] ?? 0) & mask)) return false;
  }
  return true;
}

/** The IPv4 address in the last four bytes. */
function embeddedIPv4(bytes: readonly number[]): string {
  return bytes.slice(12, 16).join(".");
}

/**
 * Whether an IPv6 address is public: global unicast (2000::/3) outside the special ranges, or an
 * IPv4-mapped (::ffff:0:0/96) or NAT64 (64:ff9b::/96) address whose IPv4 address is public. Loopback,
 * unspecified, link-local, unique local (fc00::/7, so fd00:ec2::254), multicast and every other range
 * outside 2000::/3 are not.
 */
function isPublicIPv6(address: string): boolean {
  const bytes = ipv6Bytes(address);
  if (bytes === undefined) return false;
  if (inPrefix(bytes, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff], 96))
    return isPublicIPv4(embeddedIPv4(bytes));
  if (inPrefix(bytes, [0x00, 0x64, 0xff, 0x9b], 96)) return isPublicIPv4(embeddedIPv4(bytes));
  if (!inPrefix(bytes, [0x20], 3)) return false;
  const special: [number[], number][] = [
    [[0x20, 0x01, 0x00, 0x00], 23], // IETF protocol assignments (Teredo 2001::/32, benchmarking, ORCHID)
    [[0x20, 0x01, 0x0d, 0xb8], 32], // documentation
    [[0x20, 0x02], 16], // 6to4: embeds an IPv4 address
    [[0x3f, 0xff, 0x00], 20], // documentation
  ];
  return !special.some(([prefix, bits]) => inPrefix(bytes, prefix, bits));
}

/** Whether `address` (an IPv4 or IPv6 literal, as a resolver or a socket gives it) is public. */
export function isPublicAddress(address: string): boolean {
  const family = isIP(address.split("%")[0] ?? "");
  if (family === 4) return isPublicIPv4(address);
  if (family === 6) return isPublicIPv6(address);
  return false;
}

/** The longest webhook URL accepted. */
export const MAX_URL_LENGTH = 2_048;

/** A webhook URL that passed {@link checkWebhookUrl}, or why not (`address`: a refused IP literal). */
export type UrlCheck = { ok: true; url: URL } | { ok: false; reason: string; address?: true };

/**
 * Checks a webhook URL as given: parse, scheme (https, or http too when `allowPrivate`), no
 * credentials, and, for an IP literal host, that the address is public (unless `allowPrivate`). A
 * host name is checked when a delivery connects ({@link guardedLookup}).
 */
export function checkWebhookUrl(raw: string, allowPrivate: boolean): UrlCheck {
  if (raw.length > MAX_URL_LENGTH)
    return { ok: false, reason: `must be at most ${MAX_URL_LENGTH} characters` };
  // The URL parser would drop or encode these silently: a URL must arrive as it is meant.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point.
  if (/[\u0000-\u0020\u007f]/.test(raw)) {
    return { ok: false, reason: "must not contain spaces or control characters" };
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { ok: false, reason: "is not an absolute URL" };
  }
  const schemes = allowPrivate ? ["https:", "http:"] : ["https:"];
  if (!schemes.includes(url.protocol)) {
    return { ok: false, reason: allowPrivate ? "must be an http or https URL" : "must be an https URL" };
  }
  if (url.username !== "" || url.password !== "") return { ok: false, reason: "must not carry credentials" };
  if (url.hostname === "") return { ok: false, reason: "has no host" };
  const host = hostOf(url);
  if (!allowPrivate && isIP(host) !== 0 && !isPublicAddress(host)) {
    return {
      ok: false,
      reason: "must not point at a loopback, private, link-local or reserved address",
      address: true,
    };
  }
  return { ok: true, url };
}

/** The host of a URL as a resolver or `isIP` takes it (IPv6 literals without their brackets). */
export function hostOf(url: URL): string {
  const host = url.hostname;
  return host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
}

/** The error of a refused address; its message is what the delivery log shows. */
export class AddressNotAllowedError extends Error {
  readonly code = "ERR_WEBHOOK_ADDRESS_NOT_ALLOWED";
  constructor() {
    super("address not allowed");
    this.name = "AddressNotAllowedError";
  }
}

/** A resolver with the shape of `dns.lookup` asked for every address. */
export type ResolveAll = (
  hostname: string,
  callback: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
) => void;

/** `dns.lookup` with `all: true`: the system resolver, as connections use by default. */
export const systemResolver: ResolveAll = (hostname, callback) =>
  dnsLookup(hostname, { all: true, verbatim: true }, callback);

/**
 * A `lookup` for `net.connect` that resolves with `resolve` and refuses the connection unless every
 * address is public: a name with one private address among public ones is refused too (the socket
 * could pick it). Answers in the form the caller asked for (`all` or one address).
 */
export function guardedLookup(resolve: ResolveAll = systemResolver): LookupFunction {
  return (hostname, options, callback) => {
    resolve(hostname, (err, addresses) => {
      if (err !== null) {
        callback(err, "", 0);
        return;
      }
      const family = options.family === 4 || options.family === 6 ? options.family : 0;
      const usable = addresses.filter((a) => family === 0 || a.family === family);
      if (usable.length === 0) {
        const notFound: NodeJS.ErrnoException = new Error(`no address for ${hostname}`);
        notFound.code = "ENOTFOUND";
        callback(notFound, "", 0);
        return;
      }
      if (!addresses.every((a) => isPublicAddress(a.address))) {
        callback(new AddressNotAllowedError(), "", 0);
        return;
      }
      const first = usable[0] as LookupAddress;
      if (options.all === true) (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, usable);
      else callback(null, first.address, first.family);
    });
  };
}
