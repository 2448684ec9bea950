import { createContextKey } from "@connectrpc/connect";

/** The wire protocol a call arrived on; a label of metrics and logs. */
export type Protocol = "rest" | "grpc" | "grpc-web" | "connect";

/**
 * The protocol of the current call, set by the HTTP server for every call (the transcoder sets
 * `rest`). Undefined when a service is called in memory without the HTTP server (unit tests).
 */
export const kProtocol = createContextKey<Protocol | undefined>(undefined, { description: "wire protocol" });

/** The RPC protocol a request speaks, from its Content-Type (`application/grpc-web+proto`, ...). */
export function protocolOf(contentType: string | undefined): Protocol {
  const type = (contentType ?? "").toLowerCase();
  if (type.startsWith("application/grpc-web")) return "grpc-web";
  if (type.startsWith("application/grpc")) return "grpc";
  return "connect";
}
