import type { Transport } from "@connectrpc/connect";
import { createTransport as createConnectProtocolTransport } from "@connectrpc/connect/protocol-connect";
import { createTransport as createGrpcProtocolTransport } from "@connectrpc/connect/protocol-grpc";
import {
  compressionBrotli,
  compressionGzip,
  createNodeHttpClient,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import {
  createReceiptsClient as createClient,
  type ReceiptsClient,
  type ReceiptsClientOptions,
} from "./client.js";
import { connectTransportOptions } from "./transport.js";

/**
 * The client library in Node, with what only Node has: gRPC over cleartext HTTP/2 (and the Connect
 * protocol on Node's own HTTP client, with gzip and brotli). Everything else is the same as the
 * platform-neutral entry point, which this one re-exports: `import { createReceiptsClient } from
 * "receipt-encryption-client/node"` and pass `transport: "grpc"`.
 */
export * from "./index.js";

/** Options of the Node client: the protocol may also be `grpc`. */
export type NodeReceiptsClientOptions = Omit<ReceiptsClientOptions, "transport"> & {
  /**
   * `connect` (the default: Connect over HTTP/1.1 with Node's HTTP client), `grpc` (gRPC over
   * cleartext HTTP/2), or a ready-made Connect `Transport`. The service serves both on one port.
   */
  transport?: "connect" | "grpc" | Transport;
};

/** {@link createReceiptsClient} of the platform-neutral entry point, with Node's transports. */
export function createReceiptsClient(options: NodeReceiptsClientOptions): ReceiptsClient {
  const { transport, ...rest } = options;
  if (transport === "connect" || transport === "grpc" || transport === undefined) {
    return createClient({ ...rest, transport: nodeTransport(transport ?? "connect", options.baseUrl) });
  }
  return createClient({ ...rest, transport });
}

/**
 * A Node transport for the service: the Connect protocol over HTTP/1.1, or gRPC over cleartext
 * HTTP/2, built as connect-node's `createConnectTransport` / `createGrpcTransport` build them (binary
 * format, gzip and brotli accepted), on an HTTP client that records the status of failed responses.
 * connect-node's own factories take no HTTP client.
 */
export function nodeTransport(protocol: "connect" | "grpc", baseUrl: string): Transport {
  if (protocol !== "connect" && protocol !== "grpc") {
    throw new RangeError(`transport must be "connect" or "grpc", not ${JSON.stringify(protocol)}`);
  }
  const httpClient =
    protocol === "grpc"
      ? createNodeHttpClient({ httpVersion: "2", sessionProvider: sessionsFor(baseUrl) })
      : createNodeHttpClient({ httpVersion: "1.1" });
  const options = {
    ...connectTransportOptions(baseUrl, httpClient),
    acceptCompression: [compressionGzip, compressionBrotli],
  };
  return protocol === "grpc" ? createGrpcProtocolTransport(options) : createConnectProtocolTransport(options);
}

/** One HTTP/2 session manager per transport, shared by its calls. */
function sessionsFor(baseUrl: string): () => Http2SessionManager {
  const sessions = new Http2SessionManager(baseUrl);
  return () => sessions;
}
