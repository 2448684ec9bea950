import { connect, type Socket } from "node:net";

/**
 * An HTTP/2 client written frame by frame, for the flood tests: unlike Node's client it ignores the
 * server's SETTINGS (it opens as many streams as it is told) and resets streams as fast as it can
 * write, as an attacker does. Headers go out as HPACK literals without indexing or Huffman coding.
 */

/** RST_STREAM and GOAWAY error codes (RFC 9113, section 7). */
export const H2_ERROR = { NO_ERROR: 0, CANCEL: 8, REFUSED_STREAM: 7, ENHANCE_YOUR_CALM: 11 } as const;

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
const TYPE = { DATA: 0, HEADERS: 1, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7 } as const;
const FLAG = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4 } as const;
const SETTINGS_MAX_CONCURRENT_STREAMS = 0x3;
/** SETTINGS_INITIAL_WINDOW_SIZE: 0 lets the server send no DATA on any stream. */
export const SETTINGS_INITIAL_WINDOW_SIZE = 0x4;

function frameOf(type: number, flags: number, streamId: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(9);
  header.writeUIntBE(payload.length, 0, 3);
  header.writeUInt8(type, 3);
  header.writeUInt8(flags, 4);
  header.writeUInt32BE(streamId & 0x7fffffff, 5);
  return Buffer.concat([header, payload]);
}

/** An HPACK string literal (no Huffman); lengths up to 126. */
function hpackString(text: string): Buffer {
  const bytes = Buffer.from(text, "latin1");
  if (bytes.length > 126) throw new Error("header too long for this encoder");
  return Buffer.concat([Buffer.from([bytes.length]), bytes]);
}

/** A header block of literals without indexing, new names. */
function headerBlock(headers: Record<string, string>): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of Object.entries(headers)) {
    parts.push(Buffer.from([0x00]), hpackString(name), hpackString(value));
  }
  return Buffer.concat(parts);
}

/** One raw HTTP/2 connection and what the server sent on it. */
export class RawH2Connection {
  private readonly socket: Socket;
  private buffered: Buffer = Buffer.alloc(0);
  private nextId = 1;
  /** SETTINGS_MAX_CONCURRENT_STREAMS as the server advertised it, once its SETTINGS arrived. */
  maxConcurrentStreams: number | undefined;
  /** RST_STREAM codes the server sent, by stream id. */
  readonly resets = new Map<number, number>();
  /** Streams the server answered with HEADERS. */
  readonly answered = new Set<number>();
  /** The server's GOAWAY, if it sent one. */
  goaway: { lastStreamId: number; code: number } | undefined;
  /** Resolves when the connection has closed. */
  readonly closed: Promise<void>;
  isClosed = false;
  readonly connected: Promise<void>;

  /** `settings`: the client's SETTINGS, as (identifier, value) pairs; none by default. */
  constructor(port: number, settings: ReadonlyArray<readonly [number, number]> = []) {
    this.socket = connect(port, "127.0.0.1");
    this.socket.on("error", () => undefined);
    this.connected = new Promise((resolve) => this.socket.once("connect", () => resolve()));
    this.closed = new Promise((resolve) =>
      this.socket.once("close", () => {
        this.isClosed = true;
        resolve();
      }),
    );
    this.socket.on("data", (chunk: Buffer) => this.read(chunk));
    const payload = Buffer.alloc(6 * settings.length);
    settings.forEach(([id, value], i) => {
      payload.writeUInt16BE(id, 6 * i);
      payload.writeUInt32BE(value, 6 * i + 2);
    });
    this.socket.write(Buffer.concat([PREFACE, frameOf(TYPE.SETTINGS, 0, 0, payload)]));
  }

  /** Sends a PING, as a client keeping its connection alive does. */
  ping(): void {
    this.socket.write(frameOf(TYPE.PING, 0, 0, Buffer.alloc(8)));
  }

  /** Opens a stream with a request whose body never comes (no END_STREAM) unless `end`; returns its id. */
  open(path: string, headers: Record<string, string> = {}, end = false): number {
    const id = this.nextId;
    this.nextId += 2;
    const block = headerBlock({
      ":method": end ? "GET" : "POST",
      ":scheme": "http",
      ":path": path,
      ":authority": "127.0.0.1",
      ...headers,
    });
    const flags = FLAG.END_HEADERS | (end ? FLAG.END_STREAM : 0);
    this.socket.write(frameOf(TYPE.HEADERS, flags, id, block));
    return id;
  }

  /** Resets a stream (RST_STREAM CANCEL). */
  reset(id: number): void {
    const code = Buffer.alloc(4);
    code.writeUInt32BE(H2_ERROR.CANCEL, 0);
    this.socket.write(frameOf(TYPE.RST_STREAM, 0, id, code));
  }

  /** Sends GOAWAY NO_ERROR, as a client that is done with the connection. */
  sendGoaway(): void {
    const payload = Buffer.alloc(8);
    this.socket.write(frameOf(TYPE.GOAWAY, 0, 0, payload));
  }

  /** Streams opened so far. */
  get opened(): number {
    return (this.nextId - 1) / 2;
  }

  /** Resolves once the socket has no more bytes waiting to be written. */
  flushed(): Promise<void> {
    return new Promise((resolve) => {
      if (this.socket.writableLength === 0) resolve();
      else this.socket.once("drain", () => resolve());
    });
  }

  destroy(): void {
    this.socket.destroy();
  }

  private read(chunk: Buffer): void {
    this.buffered = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    while (this.buffered.length >= 9) {
      const length = this.buffered.readUIntBE(0, 3);
      if (this.buffered.length < 9 + length) return;
      const type = this.buffered.readUInt8(3);
      const flags = this.buffered.readUInt8(4);
      const streamId = this.buffered.readUInt32BE(5) & 0x7fffffff;
      const payload = this.buffered.subarray(9, 9 + length);
      this.buffered = this.buffered.subarray(9 + length);
      this.onFrame(type, flags, streamId, payload);
    }
  }

  private onFrame(type: number, flags: number, streamId: number, payload: Buffer): void {
    if (type === TYPE.SETTINGS && (flags & FLAG.ACK) === 0) {
      for (let at = 0; at + 6 <= payload.length; at += 6) {
        if (payload.readUInt16BE(at) === SETTINGS_MAX_CONCURRENT_STREAMS) {
          this.maxConcurrentStreams = payload.readUInt32BE(at + 2);
        }
      }
      this.socket.write(frameOf(TYPE.SETTINGS, FLAG.ACK, 0));
    } else if (type === TYPE.PING && (flags & FLAG.ACK) === 0) {
      this.socket.write(frameOf(TYPE.PING, FLAG.ACK, 0, payload));
    } else if (type === TYPE.HEADERS) {
      this.answered.add(streamId);
    } else if (type === TYPE.RST_STREAM) {
      this.resets.set(streamId, payload.readUInt32BE(0));
    } else if (type === TYPE.GOAWAY) {
      // The first GOAWAY says why; a later one only closes.
      this.goaway ??= { lastStreamId: payload.readUInt32BE(0) & 0x7fffffff, code: payload.readUInt32BE(4) };
    }
  }
}
