import { describe, expect, it } from "vitest";
import { secureRandomBytes, secureRandomText } from "../../src/crypto/random.js";

describe("secureRandomBytes", () => {
  it("hands out fresh buffers of the size asked, across pool refills and past the pooled size", () => {
    const seen = new Set<string>();
    for (let i = 0; i < 2_000; i++) {
      const size = [12, 32, 44, 257][i % 4] as number;
      const bytes = secureRandomBytes(size);
      expect(bytes).toHaveLength(size);
      seen.add(bytes.toString("hex"));
    }
    expect(seen.size).toBe(2_000);
  });

  it("gives buffers that do not share memory, so zeroing a key leaves the others intact", () => {
    const key = secureRandomBytes(32);
    const iv = secureRandomBytes(12);
    const ivCopy = Buffer.from(iv);
    key.fill(0);
    expect(iv.equals(ivCopy)).toBe(true);
    expect(key.buffer).not.toBe(iv.buffer);
  });
});

describe("secureRandomText", () => {
  it("hands out each pooled byte once, beside secureRandomBytes, across refills and past the pooled size", () => {
    const seen = new Set<string>();
    for (let i = 0; i < 3_000; i++) {
      const size = [12, 16, 300][i % 3] as number;
      const text = secureRandomText(size, i % 2 === 0 ? "base64url" : "hex");
      const bytes = Buffer.from(text, i % 2 === 0 ? "base64url" : "hex");
      expect(bytes).toHaveLength(size);
      seen.add(bytes.toString("hex"));
      // The bytes handed out next are other bytes, never the zeros left where the text was taken.
      seen.add(secureRandomBytes(size).toString("hex"));
    }
    expect(seen.size).toBe(6_000);
  });
});
