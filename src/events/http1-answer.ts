/**
 * Reading an HTTP/1.1 answer's head and its body's framing, for the webhook sender's client
 * (http1.ts): the status line, `Retry-After`, `Content-Length`, `Transfer-Encoding` and `Connection`,
 * and a chunked body's chunk sizes. Anything malformed or conflicting is refused (undefined), so the
 * connection carrying it is closed rather than reused.
 */

/** The longest head of an answer read (status line and headers together). */
export const MAX_HEAD = 16 * 1024;

export const HEAD_END = Buffer.from("\r\n\r\n", "latin1");
export const CRLF = Buffer.from("\r\n", "latin1");

/** Body framing of an answer. */
export type Framing =
  | { kind: "none" }
  | { kind: "length"; left: number }
  | { kind: "chunked" }
  | { kind: "close" };

/** The parsed head of an answer. */
export interface Head {
  statusCode: number;
  framing: Framing;
  keepAlive: boolean;
  retryAfter?: string;
}

/**
 * Reads the head of an answer (status line and headers). Undefined when it is malformed: the
 * connection is then closed without reuse.
 */
export function parseHead(text: string): Head | undefined {
  const lines = text.split("\r\n");
  const status = /^HTTP\/1\.([01]) ([1-9]\d\d)(?: .*)?$/.exec(lines[0] ?? "");
  if (status === null) return undefined;
  const statusCode = Number(status[2]);
  let keepAlive = status[1] === "1";
  let length: string | undefined;
  let encoding: string | undefined;
  let retryAfter: string | undefined;
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i] as string;
    const colon = line.indexOf(":");
    if (colon <= 0) return undefined;
    const name = line.slice(0, colon).toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === "content-length") {
      if (!/^\d{1,15}$/.test(value) || (length !== undefined && length !== value)) return undefined;
      length = value;
    } else if (name === "transfer-encoding") {
      encoding = encoding === undefined ? value.toLowerCase() : `${encoding}, ${value.toLowerCase()}`;
    } else if (name === "connection") {
      if (/(^|,)\s*close\s*(,|$)/i.test(value)) keepAlive = false;
    } else if (name === "retry-after") retryAfter = value;
  }
  if (encoding !== undefined && length !== undefined) return undefined;
  const framing: Framing =
    statusCode === 204 || statusCode === 304 || statusCode < 200
      ? { kind: "none" }
      : encoding !== undefined
        ? /(^|,)\s*chunked$/.test(encoding)
          ? { kind: "chunked" }
          : { kind: "close" }
        : length !== undefined
          ? { kind: "length", left: Number(length) }
          : { kind: "close" };
  if (framing.kind === "close") keepAlive = false;
  return { statusCode, framing, keepAlive, ...(retryAfter === undefined ? {} : { retryAfter }) };
}

/** Reads a chunked body as it arrives; `done` once the last chunk and its trailers are read. */
export class ChunkReader {
  private state: "size" | "data" | "data-end" | "trailer" = "size";
  private left = 0;
  private line = "";
  done = false;
  invalid = false;

  /** Consumes `buf` from `at`; the index after the body's end (or `buf.length`). */
  read(buf: Buffer, at: number): number {
    let i = at;
    while (i < buf.length && !this.done && !this.invalid) {
      if (this.state === "data") {
        const take = Math.min(this.left, buf.length - i);
        i += take;
        this.left -= take;
        if (this.left === 0) this.state = "data-end";
        continue;
      }
      const end = buf.indexOf(CRLF, i);
      const piece = buf.toString("latin1", i, end < 0 ? buf.length : end);
      this.line += piece;
      if (this.line.length > 4096) this.invalid = true;
      if (end < 0) return buf.length;
      i = end + 2;
      this.endLine(this.line);
      this.line = "";
    }
    return i;
  }

  private endLine(line: string): void {
    if (this.state === "data-end") {
      if (line !== "") this.invalid = true;
      this.state = "size";
    } else if (this.state === "size") {
      const size = /^([0-9a-fA-F]{1,12})[ \t]*(;.*)?$/.exec(line);
      if (size === null) {
        this.invalid = true;
        return;
      }
      this.left = Number.parseInt(size[1] as string, 16);
      this.state = this.left === 0 ? "trailer" : "data";
    } else if (line === "") this.done = true;
  }
}
