/**
 * The one switch of the hand-written fast paths (`FAST_PATHS`, read by src/config.ts). This file
 * imports nothing, so a crypto worker or the command line learns the setting without loading the
 * transport. Each fast path lives beside the code it speeds up, stands in for a library on a hot path,
 * gives the library's answer for every input (falling back to it where it does not handle one), and is
 * property-tested against it:
 *
 * - `grpc-server`: unary binary gRPC served straight from the HTTP/2 stream (src/http/grpc-unary.ts)
 *   instead of connect-node through connect-fastify; switched in src/http/server.ts.
 * - `json-reader`: compiled REST JSON readers (src/rpc/json-input.ts) instead of protobuf-es's
 *   `fromJson`; switched in src/rpc/json-codec.ts, like the two below.
 * - `json-writer`: compiled REST JSON writers (src/rpc/json-output.ts) instead of `toJson`, and the
 *   REST answer written by them as JSON text (src/rpc/json-text.ts) instead of `JSON.stringify`; a
 *   page of receipts written from the store's records (src/rpc/receipt-page.ts), switched in the list
 *   handler (src/rpc/services/receipts.ts).
 * - `one-pass`: a REST body read by the compiled reader alone, its field-by-field check run only
 *   when the reader gives up (it gives up on everything the check would name), instead of checked and
 *   then read. Needs `json-reader`.
 * - `der`: RSA keys read from DER into JWKs by hand (src/crypto/der.ts), because Node imports an RSA
 *   JWK many times faster than the same key in DER, instead of OpenSSL's DER parser; switched in
 *   src/crypto/keys.ts.
 *
 * With all of them off, every call goes through connect-node/connect-fastify, protobuf-es and
 * node:crypto only. The setting is process-wide, made once before serving: by `buildApp` from
 * `FAST_PATHS` and by each crypto worker from what the pool tells it.
 */
export const FAST_PATHS = ["grpc-server", "json-reader", "json-writer", "one-pass", "der"] as const;

/** One of the fast paths. */
export type FastPath = (typeof FAST_PATHS)[number];

/** Fast paths that only serve another, and the one each serves: the one-pass read is the compiled JSON reader's. */
export const FAST_PATH_NEEDS: readonly (readonly [FastPath, FastPath])[] = [["one-pass", "json-reader"]];

let enabled: ReadonlySet<FastPath> = new Set(FAST_PATHS);

/** Switches the fast paths: those in `paths` on, every other off. Default: all on. */
export function useFastPaths(paths: Iterable<FastPath>): void {
  enabled = new Set(paths);
}

/** The fast paths now on, in the order of {@link FAST_PATHS}. */
export function fastPathsOn(): FastPath[] {
  return FAST_PATHS.filter((path) => enabled.has(path));
}

/** Whether `path` is on. */
export function isOn(path: FastPath): boolean {
  return enabled.has(path);
}
