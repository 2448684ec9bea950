import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { strictUtf8Text } from "../../src/http/transcoder.js";
import { fuzzSettings } from "../hardening/support.js";
import { startTestServer, type TestServer } from "./support.js";

/**
 * A REST body's bytes to its parsed value: strict UTF-8 (the text TextDecoder's fatal mode gives,
 * nothing replaced, a leading byte order mark dropped), and the parsed body let go once the call's
 * message is read from it.
 */

const STRICT = new TextDecoder("utf-8", { fatal: true });

function decoderText(bytes: Uint8Array): string | undefined {
  try {
    return STRICT.decode(bytes);
  } catch {
    return undefined;
  }
}

/** Bytes near the edges of UTF-8: byte order marks, every sequence length, broken and overlong ones. */
const utf8Prone = fc
  .array(
    fc.oneof(
      fc.constantFrom(
        [0xef, 0xbb, 0xbf],
        [0x7b, 0x22, 0x61, 0x22, 0x3a, 0x31, 0x7d],
        [0xc3, 0xa9],
        [0xe2, 0x82, 0xac],
        [0xf0, 0x9f, 0x98, 0x80],
        [0xc3],
        [0xc3, 0x28],
        [0xc0, 0xaf],
        [0xed, 0xa0, 0x80],
        [0xf4, 0x90, 0x80, 0x80],
        [0xef, 0xbf, 0xbe],
        [0xff],
        [0x00],
      ),
      fc.array(fc.integer({ min: 0, max: 0x7f }), { maxLength: 4 }),
      fc.array(fc.integer({ min: 0, max: 0xff }), { maxLength: 4 }),
    ),
    { maxLength: 8 },
  )
  .map((parts) => Buffer.from(parts.flat()));

describe("strictUtf8Text", () => {
  it("gives what TextDecoder's fatal mode gives, or undefined where it throws", () => {
    fc.assert(
      fc.property(utf8Prone, (bytes) => {
        expect(strictUtf8Text(bytes), bytes.toString("hex")).toBe(decoderText(bytes));
      }),
      fuzzSettings(5000),
    );
  });

  it("drops one leading byte order mark, as the decoder does, and keeps any other", () => {
    const bom = [0xef, 0xbb, 0xbf];
    expect(strictUtf8Text(Buffer.from([...bom, 0x7b, 0x7d]))).toBe("{}");
    expect(strictUtf8Text(Buffer.from([...bom, ...bom, 0x31]))).toBe("\ufeff1");
    expect(strictUtf8Text(Buffer.from([0x31, ...bom]))).toBe("1\ufeff");
    expect(strictUtf8Text(Buffer.from(bom))).toBe("");
  });

  it("refuses what is not UTF-8 rather than replacing it", () => {
    for (const bytes of [
      [0xc3, 0x28],
      [0xff, 0xfe],
      [0xc0, 0xaf],
      [0xed, 0xa0, 0x80],
      [0xe2, 0x82],
    ]) {
      expect(strictUtf8Text(Buffer.from(bytes)), String(bytes)).toBeUndefined();
    }
  });
});

describe("a REST body over the wire", () => {
  let t: TestServer;
  /** `request.body` as each REST response left: undefined once the body was read into a message. */
  const bodiesAtResponse: unknown[] = [];
  beforeAll(async () => {
    t = await startTestServer({
      addRoutes: (app) => {
        app.addHook("onResponse", async (request) => {
          if (request.url.startsWith("/api/")) bodiesAtResponse.push(request.body);
        });
      },
    });
  });
  afterAll(async () => {
    await t.close();
  });

  async function post(path: string, body: Uint8Array | string) {
    const res = await fetch(`${t.baseUrl}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
    });
    return { status: res.status, text: await res.text() };
  }

  it("reads a body after a byte order mark as the body, and refuses bytes that are not UTF-8", async () => {
    const json = Buffer.from(JSON.stringify({ hashedPan: "A".repeat(64), publicKey: "PUB", keyId: "k" }));
    const withBom = await post(
      "/api/v1/onboarding/register",
      Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), json]),
    );
    expect(withBom.status, withBom.text).toBe(200);
    const broken = await post(
      "/api/v1/onboarding/register",
      Buffer.concat([json.subarray(0, 14), Buffer.from([0xc3, 0x28]), json.subarray(14)]),
    );
    expect(broken.status).toBe(400);
    expect(JSON.parse(broken.text).error.details).toBe("body: is not valid JSON");
  });

  it("lets the parsed body go once the call's message is read from it", async () => {
    bodiesAtResponse.length = 0;
    const answer = await post(
      "/api/v1/onboarding/register",
      JSON.stringify({ hashedPan: "A".repeat(64), publicKey: "PUB", keyId: "k" }),
    );
    expect(answer.status, answer.text).toBe(200);
    expect(bodiesAtResponse).toEqual([undefined]);
  });
});
