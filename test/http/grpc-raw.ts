import { connect, constants } from "node:http2";
import { create, type DescMessage, type MessageInitShape, toBinary } from "@bufbuild/protobuf";

/**
 * A gRPC client by hand for the fast-path tests: sends exactly the bytes and headers it is given and
 * reports exactly what came back, so the fast path's answers can be compared with the Connect path's.
 */

/** One answer as it arrived: response headers (`date` left out), trailers, body and reset code. */
export interface RawAnswer {
  headers: Record<string, string>;
  trailers: Record<string, string>;
  body: Buffer;
  /** The RST_STREAM code the stream closed with, 0 for none or NO_ERROR. */
  rstCode: number;
  /** Whether the stream closed (both sides done) within 200 ms of the end of the answer. */
  closed: boolean;
}

/** A length-prefixed gRPC message (`flags` 1 marks it compressed). */
export function frame(bytes: Uint8Array, flags = 0): Buffer {
  const framed = Buffer.alloc(5 + bytes.length);
  framed.writeUInt8(flags, 0);
  framed.writeUInt32BE(bytes.length, 1);
  framed.set(bytes, 5);
  return framed;
}

/** The framed binary encoding of a message of `schema`. */
export function framed<Desc extends DescMessage>(schema: Desc, init: MessageInitShape<Desc>): Buffer {
  return frame(toBinary(schema, create(schema, init)));
}

/**
 * One gRPC call on a fresh HTTP/2 session. Resolves once the stream has closed, or 200 ms after the
 * answer has ended if it stays open (a server that never read the rest of the request); rejects
 * after `timeoutMs`.
 */
export function rawGrpc(
  baseUrl: string,
  path: string,
  body: Buffer,
  headers: Record<string, string> = {},
  timeoutMs = 5_000,
): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const { session, stream } = openCall(baseUrl, path, headers);
    const answer: RawAnswer = { headers: {}, trailers: {}, body: Buffer.alloc(0), rstCode: 0, closed: false };
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      session.destroy();
      reject(new Error(`no answer from ${path} within ${timeoutMs} ms`));
    }, timeoutMs);
    let settled = false;
    const done = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      answer.body = Buffer.concat(chunks);
      answer.rstCode = stream.rstCode ?? 0;
      session.destroy();
      resolve(answer);
    };
    stream.on("response", (h) => {
      answer.headers = plain(h);
      delete answer.headers.date;
    });
    stream.on("trailers", (t) => {
      answer.trailers = plain(t);
    });
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("error", () => undefined);
    stream.once("end", () => setTimeout(done, 200));
    stream.once("close", () => {
      if (!settled) answer.closed = true;
      done();
    });
    stream.end(body);
  });
}

/**
 * Sends `body` (ending the request when `endRequest`, else leaving it mid-body), waits `afterMs`, then
 * resets the stream (RST_STREAM CANCEL unless `code` says otherwise) and closes the session.
 */
export async function cancelledGrpc(
  baseUrl: string,
  path: string,
  body: Buffer,
  options: { afterMs: number; endRequest: boolean; code?: number },
): Promise<void> {
  const { session, stream } = openCall(baseUrl, path);
  stream.on("error", () => undefined);
  if (options.endRequest) stream.end(body);
  else stream.write(body);
  await new Promise((resolve) => setTimeout(resolve, options.afterMs));
  stream.close(options.code ?? constants.NGHTTP2_CANCEL);
  session.close();
}

function plain(headers: Record<string, unknown>): Record<string, string> {
  const result: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) result[name] = String(value);
  return result;
}

/** A new HTTP/2 session to `baseUrl` and one gRPC request on it (headers sent, body not yet). */
function openCall(baseUrl: string, path: string, headers: Record<string, string> = {}) {
  const session = connect(baseUrl);
  session.on("error", () => undefined);
  const stream = session.request({
    ":method": "POST",
    ":path": path,
    "content-type": "application/grpc",
    te: "trailers",
    ...headers,
  });
  return { session, stream };
}
