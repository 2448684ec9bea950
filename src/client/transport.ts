import type { Transport } from "@connectrpc/connect";
import { type UniversalClientFn, validateReadWriteMaxBytes } from "@connectrpc/connect/protocol";
import { createTransport as createConnectProtocolTransport } from "@connectrpc/connect/protocol-connect";
import { createTransport as createGrpcProtocolTransport } from "@connectrpc/connect/protocol-grpc";
import {
  compressionBrotli,
  compressionGzip,
  createNodeHttpClient,
  Http2SessionManager,
} from "@connectrpc/connect-node";

/**
 * The metadata entry in which the client keeps the HTTP status of a failed response, when there was
 * one (no entry for a network error or a timeout). Connect turns a bare HTTP error of an intermediary
 * into a code that loses it: a proxy's 400 becomes Internal and its 409 Unknown, both of which look
 * transient. The retry rules are stated in HTTP statuses, so they need it.
 */
export const HTTP_STATUS_METADATA = "x-receipts-client-http-status";

/**
 * Wraps an HTTP client so that a response with a status other than 200 carries its status in its
 * headers, which Connect hands to the resulting error as `metadata`, on both protocols.
 */
export function recordingHttpStatus(client: UniversalClientFn): UniversalClientFn {
  return async (request) => {
    const response = await client(request);
    if (response.status !== 200) response.header.set(HTTP_STATUS_METADATA, String(response.status));
    return response;
  };
}

/**
 * A Node transport for the service: the Connect protocol over HTTP/1.1, or gRPC over cleartext
 * HTTP/2, as connect-node's `createConnectTransport` / `createGrpcTransport` build them with their
 * defaults (binary format, gzip and brotli accepted), but on an HTTP client that records the status
 * of failed responses ({@link recordingHttpStatus}). connect-node's factories take no HTTP client.
 */
export function nodeTransport(protocol: "connect" | "grpc", baseUrl: string): Transport {
  let httpClient: UniversalClientFn;
  if (protocol === "grpc") {
    const sessions = new Http2SessionManager(baseUrl);
    httpClient = createNodeHttpClient({ httpVersion: "2", sessionProvider: () => sessions });
  } else {
    httpClient = createNodeHttpClient({ httpVersion: "1.1" });
  }
  const options = {
    baseUrl,
    httpClient: recordingHttpStatus(httpClient),
    useBinaryFormat: true,
    interceptors: [],
    acceptCompression: [compressionGzip, compressionBrotli],
    sendCompression: null,
    ...validateReadWriteMaxBytes(undefined, undefined, undefined),
  };
  return protocol === "grpc" ? createGrpcProtocolTransport(options) : createConnectProtocolTransport(options);
}
