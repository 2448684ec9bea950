import type { ConnectError } from "@connectrpc/connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";

/**
 * The `grpc-status` / `grpc-message` / `grpc-status-details-bin` metadata of a gRPC answer, with
 * `grpc-message` percent-encoded as the gRPC wire spec says (PROTOCOL-HTTP2.md, "Status-Message"):
 * only bytes outside printable ASCII (0x20-0x7E) and '%' itself are encoded. connect-es uses
 * `encodeURIComponent`, which also encodes ':', ' ', ',' and the like; grpc-js decodes with
 * `decodeURI`, which leaves reserved characters encoded, so its users read `Missing API key%3A ...`.
 */

/** Percent-encodes `message` for `grpc-message`: UTF-8 bytes outside 0x20-0x7E, and '%'. */
export function encodeGrpcMessage(message: string): string {
  // Fast path: nothing to encode in the usual all-printable-ASCII message.
  if (/^[\x20-\x24\x26-\x7e]*$/.test(message)) return message;
  let out = "";
  for (const byte of Buffer.from(message, "utf8")) {
    out +=
      byte >= 0x20 && byte <= 0x7e && byte !== 0x25
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/**
 * Sets the status metadata of `error` (or OK) on `target`, as connect-es's `setTrailerStatus` does,
 * with `grpc-message` encoded by {@link encodeGrpcMessage}.
 */
export function setGrpcStatus<T extends Headers>(target: T, error?: ConnectError): T {
  setTrailerStatus(target, error);
  if (error !== undefined) target.set("grpc-message", encodeGrpcMessage(error.rawMessage));
  return target;
}

/**
 * Re-encodes a `grpc-message` that connect-es encoded with `encodeURIComponent`; a value that does not
 * decode is left as it is.
 */
export function reencodeGrpcMessage(value: string): string {
  try {
    return encodeGrpcMessage(decodeURIComponent(value));
  } catch {
    return value;
  }
}
