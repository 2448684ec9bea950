import type { Transport } from "@connectrpc/connect";
import { type UniversalClientFn, validateReadWriteMaxBytes } from "@connectrpc/connect/protocol";
import { createTransport as createConnectProtocolTransport } from "@connectrpc/connect/protocol-connect";

/**
 * The metadata entry in which the client keeps the HTTP status of a failed response, when there was
 * one (no entry for a network error or a timeout). Connect turns a bare HTTP error of an intermediary
 * into a code that loses it: a proxy's 400 becomes Internal and its 409 Unknown, both of which look
 * transient. The client's retry rules are stated in HTTP statuses, so they need it.
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

/** The options of the client's Connect transports: binary messages, no compression of requests. */
export function connectTransportOptions(baseUrl: string, httpClient: UniversalClientFn) {
  return {
    baseUrl,
    httpClient: recordingHttpStatus(httpClient),
    useBinaryFormat: true,
    interceptors: [],
    sendCompression: null,
    ...validateReadWriteMaxBytes(undefined, undefined, undefined),
  };
}

/**
 * The client's default transport, for every platform: the Connect protocol over the platform's
 * `fetch` (Node 22+, browsers, React Native, workers), binary messages, on an HTTP client that
 * records the status of failed responses ({@link recordingHttpStatus}). gRPC over HTTP/2 needs
 * Node: see `./node.js`.
 */
export function fetchTransport(baseUrl: string, fetchFn: typeof fetch = globalThis.fetch): Transport {
  if (typeof fetchFn !== "function") {
    throw new TypeError("This platform has no fetch: pass transport (a Connect Transport) instead");
  }
  return createConnectProtocolTransport({
    ...connectTransportOptions(baseUrl, unaryFetchClient(fetchFn)),
    acceptCompression: [],
  });
}

/**
 * An HTTP client for unary calls (all the service has) on `fetch`, using only what every fetch has:
 * the request body as bytes (Node's fetch refuses a stream body without `duplex`) and the response
 * read with `arrayBuffer()` (React Native's fetch has no response stream). Its headers are a copy, so
 * the status can be recorded in them (a fetch response's own are immutable), without
 * `Content-Encoding`: fetch has already decoded the body (browsers ask for gzip whatever the page
 * says, and Connect would refuse a compression it did not ask for).
 */
export function unaryFetchClient(fetchFn: typeof fetch): UniversalClientFn {
  return async (request) => {
    const body = request.body === undefined ? undefined : await bytesOf(request.body);
    // Called unbound, fetch throws "Illegal invocation" in browsers.
    const response = await fetchFn.call(globalThis, request.url, {
      method: request.method,
      headers: request.header,
      ...(request.signal === undefined ? {} : { signal: request.signal }),
      ...(body === undefined ? {} : { body }),
    });
    const bytes = new Uint8Array(await response.arrayBuffer());
    const header = new Headers(response.headers);
    header.delete("content-encoding");
    header.delete("content-length");
    return {
      status: response.status,
      header,
      body: (async function* () {
        yield bytes;
      })(),
      trailer: new Headers(),
    };
  };
}

async function bytesOf(chunks: AsyncIterable<Uint8Array>): Promise<Uint8Array<ArrayBuffer>> {
  const parts: Uint8Array[] = [];
  let length = 0;
  for await (const chunk of chunks) {
    parts.push(chunk);
    length += chunk.length;
  }
  const bytes = new Uint8Array(length);
  let offset = 0;
  for (const part of parts) {
    bytes.set(part, offset);
    offset += part.length;
  }
  return bytes;
}
