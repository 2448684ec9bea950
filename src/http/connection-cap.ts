import type { Socket } from "node:net";
import { DEFAULT_HTTP2_CONNECTIONS_PER_ADDRESS } from "../config.js";
import { withoutIpv4Prefix } from "../trusted-proxies.js";

/**
 * A cap on the HTTP/2 connections one client address may hold open at once
 * (`HTTP2_MAX_CONNECTIONS_PER_ADDRESS`). Each HTTP/2 session holds buffers, flow-control windows and
 * up to `HTTP2_MAX_CONCURRENT_STREAMS` streams, and opening one needs no API key, so without a cap one
 * address could hold memory without bound. A connection over the cap is refused as soon as its
 * preface says it is HTTP/2, before an HTTP/2 session exists: it gets the server's empty SETTINGS and
 * a GOAWAY ENHANCE_YOUR_CALM saying why, and is closed. HTTP/1.1 connections are not counted (their
 * keep-alive and request timeouts bound them). Trusted proxies (`TRUSTED_PROXIES`) are exempt: all
 * their clients' connections arrive from their address.
 */

/** Counts open HTTP/2 connections per peer address. */
export interface ConnectionCap {
  /**
   * Whether `socket` may become an HTTP/2 connection: counts it (until it closes) and returns true, or
   * returns false when its address already holds the maximum.
   */
  admit(socket: Socket): boolean;
  /** Connections open now from `address`. */
  openFrom(address: string): number;
}

/** A cap of `max` HTTP/2 connections per address, not applied to addresses `exempt` says are proxies. */
export function createConnectionCap(
  max: number = DEFAULT_HTTP2_CONNECTIONS_PER_ADDRESS,
  exempt: (address: string) => boolean = () => false,
): ConnectionCap {
  const open = new Map<string, number>();
  return {
    admit(socket) {
      const address = withoutIpv4Prefix(socket.remoteAddress ?? "");
      if (exempt(address)) return true;
      const count = open.get(address) ?? 0;
      if (count >= max) return false;
      open.set(address, count + 1);
      socket.once("close", () => {
        const left = (open.get(address) ?? 1) - 1;
        if (left <= 0) open.delete(address);
        else open.set(address, left);
      });
      return true;
    },
    openFrom: (address) => open.get(withoutIpv4Prefix(address)) ?? 0,
  };
}

/** HTTP/2 error code ENHANCE_YOUR_CALM (RFC 9113, section 7). */
const ENHANCE_YOUR_CALM = 0x0b;

/** The reason sent in the GOAWAY's debug data. */
const REFUSAL = Buffer.from("too many HTTP/2 connections from this address", "latin1");

/**
 * Refuses an HTTP/2 connection without making a session of it: the server's connection preface (an
 * empty SETTINGS frame), then GOAWAY (last stream 0, ENHANCE_YOUR_CALM, the reason), then close.
 */
export function refuseHttp2Connection(socket: Socket): void {
  const settings = Buffer.from([0, 0, 0, 0x04, 0, 0, 0, 0, 0]);
  const goaway = Buffer.alloc(9 + 8 + REFUSAL.length);
  goaway.writeUIntBE(8 + REFUSAL.length, 0, 3);
  goaway[3] = 0x07;
  goaway.writeUInt32BE(0, 9);
  goaway.writeUInt32BE(ENHANCE_YOUR_CALM, 13);
  REFUSAL.copy(goaway, 17);
  const destroy = setTimeout(() => socket.destroy(), 1_000);
  destroy.unref();
  socket.once("close", () => clearTimeout(destroy));
  socket.on("error", () => socket.destroy());
  socket.end(Buffer.concat([settings, goaway]));
  socket.resume();
}
