import type { Protocol } from "../rpc/context.js";

/** The RPC protocol a request speaks, from its Content-Type (`application/grpc-web+proto`, ...). */
export function protocolOf(contentType: string | undefined): Protocol {
  const type = (contentType ?? "").toLowerCase();
  if (type.startsWith("application/grpc-web")) return "grpc-web";
  if (type.startsWith("application/grpc")) return "grpc";
  return "connect";
}
