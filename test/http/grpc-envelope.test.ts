import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { EnvelopeReader, encodeEnvelope } from "../../src/http/grpc-envelope.js";

/** One envelope: its flags byte and its message bytes. */
const envelope = fc.record({
  flags: fc.integer({ min: 0, max: 255 }),
  data: fc.uint8Array({ maxLength: 40 }),
});

/** `body` cut at `cuts` (sorted, deduplicated, inside the body) into the chunks a stream would give. */
function chunksOf(body: Buffer, cuts: number[]): Buffer[] {
  const points = [...new Set(cuts.map((c) => c % (body.length + 1)))].sort((a, b) => a - b);
  const chunks: Buffer[] = [];
  let start = 0;
  for (const point of [...points, body.length]) {
    if (point > start) chunks.push(body.subarray(start, point));
    start = Math.max(start, point);
  }
  return chunks;
}

/** The body of `envelopes`, framed as gRPC frames them (any flags byte). */
function bodyOf(envelopes: { flags: number; data: Uint8Array }[]): Buffer {
  return Buffer.concat(
    envelopes.map(({ flags, data }) => {
      const frame = encodeEnvelope(data);
      frame[0] = flags;
      return frame;
    }),
  );
}

/**
 * The gRPC fast path's envelope reader, against the framing read by hand: however the body is cut
 * into chunks (inside a header, inside a message, at a boundary, one byte at a time), it gives every
 * envelope's flags and bytes in order, each as soon as its last byte arrives, and leaves nothing
 * pending at the end of a whole body.
 */
describe("EnvelopeReader", () => {
  it("reads every envelope of a body however it is cut into chunks", () => {
    fc.assert(
      fc.property(
        fc.array(envelope, { maxLength: 5 }),
        fc.array(fc.nat(), { maxLength: 12 }),
        (envelopes, cuts) => {
          const body = bodyOf(envelopes);
          const reader = new EnvelopeReader(1_000);
          const read: { flags: number; data: number[] }[] = [];
          let received = 0;
          for (const chunk of chunksOf(body, cuts)) {
            reader.push(chunk);
            received += chunk.length;
            for (let e = reader.next(); e !== undefined; e = reader.next()) {
              read.push({ flags: e.flags, data: [...e.data] });
            }
            // Every envelope whose last byte has arrived has been given, and no other.
            let complete = 0;
            let offset = 0;
            for (const { data } of envelopes) {
              offset += 5 + data.length;
              if (offset <= received) complete += 1;
            }
            expect(read.length).toBe(complete);
          }
          expect(read).toEqual(envelopes.map(({ flags, data }) => ({ flags, data: [...data] })));
          expect(reader.pendingBytes).toBe(0);
        },
      ),
      { numRuns: 1_000 },
    );
  });

  it("counts the bytes of an unfinished envelope, not the header of one started", () => {
    fc.assert(
      fc.property(envelope, fc.nat(), fc.nat(), (e, cut, cut2) => {
        const body = bodyOf([e]);
        const end = cut % body.length;
        const reader = new EnvelopeReader(1_000);
        for (const chunk of chunksOf(body.subarray(0, end), [cut2])) reader.push(chunk);
        expect(reader.next()).toBeUndefined();
        expect(reader.pendingBytes).toBe(end < 5 ? end : end - 5);
      }),
      { numRuns: 500 },
    );
  });

  it("refuses a message over the limit as soon as its header arrives", () => {
    const reader = new EnvelopeReader(10);
    reader.push(bodyOf([{ flags: 0, data: new Uint8Array(11) }]).subarray(0, 5));
    expect(() => reader.next()).toThrow("message size 11 is larger than configured readMaxBytes 10");
  });
});
