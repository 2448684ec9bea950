import { Code, ConnectError } from "@connectrpc/connect";

/**
 * The gRPC length-prefixed message framing ("envelope": one flags byte, a big-endian 32-bit length,
 * then the message), read and written by hand for the unary fast path (`grpc-unary.ts`). Reading
 * follows connect-es's envelope decoder closely enough that every malformed body gets the answer the
 * Connect path gives it: the limit is checked as soon as an envelope's header announces its length,
 * and bytes left at the end of the body are counted the way connect-es counts them.
 */

/** The flag of an envelope whose message is compressed (gRPC, gRPC-Web and Connect alike). */
export const COMPRESSED_FLAG = 0b0000_0001;

/** Bytes of an envelope header: the flags byte and the message length. */
const HEADER_BYTES = 5;

/** One enveloped message: its flags and its (still encoded) message bytes. */
export interface Envelope {
  flags: number;
  data: Buffer;
}

/**
 * Splits a request body into envelopes as its chunks arrive. In the common case (a whole envelope in
 * one chunk) the message is a view of the chunk, never a copy.
 */
export class EnvelopeReader {
  private readonly chunks: Buffer[] = [];
  private buffered = 0;
  private flags = 0;
  /** The length of the envelope whose header has been read; -1 while waiting for a header. */
  private length = -1;

  /** `readMaxBytes`: the largest message accepted, as Connect's option of that name. */
  constructor(private readonly readMaxBytes: number) {}

  /**
   * Bytes received that are not part of a complete envelope, without the header of an envelope
   * already started: connect-es answers "incomplete envelope" at the end of a body only when this is
   * not zero (a body that is just a header is a missing message to it).
   */
  get pendingBytes(): number {
    return this.buffered;
  }

  /** Adds the next chunk of the body. */
  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
  }

  /**
   * The next complete envelope, or undefined until more bytes arrive. Throws RESOURCE_EXHAUSTED, with
   * connect-es's message, as soon as a header announces a message over the limit.
   */
  next(): Envelope | undefined {
    if (this.length < 0) {
      if (this.buffered < HEADER_BYTES) return undefined;
      const first = this.chunks[0] as Buffer;
      if (first.length >= HEADER_BYTES) {
        // The common case: the header is read where it is, with no view made of it.
        this.flags = first[0] as number;
        this.length = first.readUInt32BE(1);
        this.drop(HEADER_BYTES);
      } else {
        const header = this.take(HEADER_BYTES);
        this.flags = header.readUInt8(0);
        this.length = header.readUInt32BE(1);
      }
      if (this.length > this.readMaxBytes) {
        throw new ConnectError(
          `message size ${this.length} is larger than configured readMaxBytes ${this.readMaxBytes}`,
          Code.ResourceExhausted,
        );
      }
    }
    if (this.buffered < this.length) return undefined;
    const data = this.take(this.length);
    this.length = -1;
    return { flags: this.flags, data };
  }

  /** Removes the first `n` bytes of the first chunk (the caller checked it has that many). */
  private drop(n: number): void {
    this.buffered -= n;
    const first = this.chunks[0] as Buffer;
    if (first.length === n) this.chunks.shift();
    else this.chunks[0] = first.subarray(n);
  }

  /** Removes the first `n` buffered bytes (the caller checked there are that many) and returns them. */
  private take(n: number): Buffer {
    this.buffered -= n;
    const first = this.chunks[0];
    if (first !== undefined && first.length >= n) {
      if (first.length === n) {
        // A chunk that is exactly the bytes asked for is returned itself, not a view of it.
        this.chunks.shift();
        return first;
      }
      this.chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = Buffer.allocUnsafe(n);
    let offset = 0;
    while (offset < n) {
      const chunk = this.chunks[0] as Buffer;
      const used = Math.min(chunk.length, n - offset);
      chunk.copy(out, offset, 0, used);
      offset += used;
      if (used === chunk.length) this.chunks.shift();
      else this.chunks[0] = chunk.subarray(used);
    }
    return out;
  }
}

/** One uncompressed envelope around `message`. */
export function encodeEnvelope(message: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(HEADER_BYTES + message.length);
  frame.writeUInt8(0, 0);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, HEADER_BYTES);
  return frame;
}
