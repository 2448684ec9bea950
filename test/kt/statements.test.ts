import { describe, expect, it } from "vitest";
import { fromUtf8, utf8 } from "../../src/kt/bytes.js";
import { cardStateOf, nextCardState, nextInSequence } from "../../src/kt/card-rules.js";
import { canonicalJson, type JsonObject } from "../../src/kt/json.js";
import { commitmentOf, parseLeaf, parTagOf, statementLeaf } from "../../src/kt/leaves.js";
import { leafHash, MemoryTree } from "../../src/kt/merkle.js";
import {
  type CardStatement,
  parseStatement,
  parseTime,
  withCardRef,
  withoutCardRef,
} from "../../src/kt/statements.js";
import {
  appendToTiles,
  consistencyProofFromTiles,
  inclusionProofFromTiles,
  MemoryTiles,
  rootFromTiles,
  tilePath,
} from "../../src/kt/tiles.js";
import { nodeSha256 } from "./support.js";

const KEY_A = "11111111-1111-4111-a111-111111111111";
const KEY_B = "22222222-2222-4222-a222-222222222222";
const binding: JsonObject = {
  v: 1,
  type: "receipts.v1/key-binding",
  issuer: "bank-a",
  cardRef: "a".repeat(64),
  bin: "41111111",
  keyId: KEY_A,
  algorithm: "HPKE-P256-SHA256-A256GCM",
  spkiSha256: "A".repeat(43),
  version: 1,
  supersedes: null,
  notBefore: "2026-11-01T00:00:00Z",
  notAfter: "2026-12-01T00:00:00Z",
};
const text = (o: JsonObject) => canonicalJson(o);

describe("statements", () => {
  it("accepts a canonical key binding and refuses every departure from it, with the reason", () => {
    expect(parseStatement(text(binding)).ok).toBe(true);
    const cases: Array<[string, string]> = [
      [text(binding).replace('{"algorithm"', '{ "algorithm"'), "canonical"],
      [text(binding).replace('"bin":"41111111"', '"bin":"41111111","bin":"41111111"'), "twice"],
      [text({ ...binding, extra: 1 }), "unknown member"],
      [text({ ...binding, notAfter: "2026-12-10T00:00:00Z" }), "35 days"],
      [text({ ...binding, notAfter: "2026-10-10T00:00:00Z" }), "after notBefore"],
      [text({ ...binding, notBefore: "2026-11-01T00:00:00.000Z" }), "notBefore"],
      [text({ ...binding, notBefore: "2026-02-30T00:00:00Z" }), "notBefore"],
      [text({ ...binding, version: 0 }), "version"],
      [text({ ...binding, cardRef: "A".repeat(64) }), "cardRef"],
      [text({ ...binding, keyId: KEY_A.toUpperCase() }), "keyId"],
      [text({ ...binding, supersedes: KEY_A }), "supersedes its own"],
      [text({ ...binding, v: 2 }), "v must be 1"],
      [text({ ...binding, type: "receipts.v1/other" }), "type"],
      [text({ ...binding, spkiSha256: `${"A".repeat(42)}B` }), "spkiSha256"],
      // Names every plain object inherits are members like any other: unknown, and no type.
      [text({ ...binding, constructor: 1 }), "unknown member"],
      [text({ ...binding, toString: "x" }), "unknown member"],
      [text(binding).replace('{"algorithm"', '{"__proto__":{},"algorithm"'), "unknown member"],
      ['{"type":"constructor","v":1}', "type"],
      ['{"type":"__proto__","v":1}', "type"],
      ['{"type":"hasOwnProperty","v":1}', "type"],
    ];
    for (const [statement, reason] of cases) {
      const parsed = parseStatement(statement);
      expect(parsed.ok, statement).toBe(false);
      if (!parsed.ok) expect(parsed.reason, statement).toContain(reason);
    }
    // The same text after a UTF-8 byte-order mark, as bytes: a second spelling, refused.
    const marked = new Uint8Array([0xef, 0xbb, 0xbf, ...utf8(text(binding))]);
    expect(parseStatement(marked)).toMatchObject({ ok: false, reason: "statement is not JSON" });
    const { issuer: _i, ...missing } = binding;
    expect(parseStatement(text(missing))).toMatchObject({
      ok: false,
      reason: expect.stringContaining("lacks"),
    });
    expect(
      parseStatement(text({ ...binding, notAfter: "2026-12-10T00:00:00Z" }), { maxBindingDays: 40 }).ok,
    ).toBe(true);
  });

  it("parses each tenant statement type with exactly its members", () => {
    const common = { v: 1, issuer: "bank-a", version: 3, issuedAt: "2026-11-25T10:00:00Z" };
    const good = [
      {
        type: "receipts.v1/signing-key",
        signingKeyId: `sk_${"0".repeat(32)}`,
        algorithm: "Ed25519",
        spki: "MCowBQYDK2VwAyEA",
        role: "signer",
      },
      { type: "receipts.v1/require-bindings", requireBindings: true },
      { type: "receipts.v1/bin-claim", prefix: "411111", kind: "token-bin" },
      { type: "receipts.v1/bin-release", prefix: "411111", kind: "bin", to: "bank-b" },
      { type: "receipts.v1/plaintext-intake", plaintextIntake: "refuse" },
    ];
    for (const g of good) {
      expect(parseStatement(text({ ...common, ...g } as JsonObject)).ok, g.type).toBe(true);
      expect(
        parseStatement(text({ ...common, ...g, cardRef: "a".repeat(64) } as JsonObject)).ok,
        g.type,
      ).toBe(false);
    }
    const revocation = {
      v: 1,
      type: "receipts.v1/signing-key-revocation",
      issuer: "bank-a",
      signingKeyId: `sk_${"0".repeat(32)}`,
      version: 4,
      revokedAt: "2026-11-25T10:00:00Z",
    };
    expect(parseStatement(text(revocation)).ok).toBe(true);
  });

  it("stores a statement without cardRef and rebuilds its exact bytes from the caller's card reference", () => {
    const original = text(binding);
    const stored = withoutCardRef(original);
    expect(stored).not.toContain("cardRef");
    expect(stored).not.toContain("a".repeat(64));
    expect(fromUtf8(withCardRef(stored, "a".repeat(64)))).toBe(original);
    expect(fromUtf8(withCardRef(stored, "b".repeat(64)))).not.toBe(original);
  });

  it("reads times only as YYYY-MM-DDTHH:MM:SSZ", () => {
    expect(parseTime("2026-11-25T10:00:00Z")).toBe(Date.parse("2026-11-25T10:00:00Z"));
    for (const bad of [
      "2026-11-25T10:00:00+00:00",
      "2026-11-25 10:00:00Z",
      "2026-13-01T00:00:00Z",
      "2026-11-25T24:00:00Z",
    ]) {
      expect(parseTime(bad), bad).toBeUndefined();
    }
  });
});

describe("card statement order", () => {
  const b = (changes: Partial<Record<string, unknown>>) =>
    ({ ...binding, ...changes }) as unknown as CardStatement;
  const revoke = (keyId: string, version: number) =>
    ({
      v: 1,
      type: "receipts.v1/key-revocation",
      issuer: "bank-a",
      cardRef: "a".repeat(64),
      bin: "41111111",
      keyId,
      version,
      reason: "lost",
      revokedAt: "2026-11-02T00:00:00Z",
    }) as CardStatement;

  it("accepts bind, refresh, rotate, revoke, bind again: each version the last + 1", () => {
    const history = [
      b({}),
      b({ version: 2 }),
      b({ version: 3, keyId: KEY_B, supersedes: KEY_A }),
      revoke(KEY_B, 4),
    ];
    expect(cardStateOf(history)).toMatchObject({
      ok: true,
      value: { version: 4, active: null, retired: [KEY_A, KEY_B] },
    });
  });

  it("refuses a skipped or repeated version, a wrong supersedes, a changed key under one id, and a retired key again", () => {
    const first = nextCardState(undefined, b({}));
    if (!first.ok) throw new Error(first.reason);
    const state = first.value;
    expect(nextCardState(state, b({ version: 3 }))).toMatchObject({
      ok: false,
      reason: expect.stringContaining("version must be 2"),
    });
    expect(nextCardState(state, b({ version: 1 })).ok).toBe(false);
    expect(nextCardState(undefined, b({ version: 2 })).ok).toBe(false);
    expect(nextCardState(state, b({ version: 2, keyId: KEY_B, supersedes: null })).ok).toBe(false);
    expect(nextCardState(state, b({ version: 2, spkiSha256: "B".repeat(43) })).ok).toBe(false);
    expect(nextCardState(state, revoke(KEY_B, 2)).ok).toBe(false);
    const rotated = cardStateOf([b({}), b({ version: 2, keyId: KEY_B, supersedes: KEY_A })]);
    if (!rotated.ok || rotated.value === undefined) throw new Error("rotation refused");
    expect(nextCardState(rotated.value, b({ version: 3, keyId: KEY_A, supersedes: KEY_B }))).toMatchObject({
      ok: false,
      reason: "a rotated or revoked key is never active again",
    });
    expect(nextInSequence(4, { version: 5 }).ok).toBe(true);
    expect(nextInSequence(4, { version: 4 }).ok).toBe(false);
  });
});

describe("leaves", () => {
  it("builds the three leaf kinds and takes them apart", () => {
    const spki = new Uint8Array(44).fill(3);
    const opening = new Uint8Array(16).fill(9);
    const statement = new TextEncoder().encode(text(binding));
    const pan = statementLeaf({ signerSpki: spki, opening, statement });
    expect(pan.length).toBe(41);
    expect(pan[0]).toBe(1);
    expect(parseLeaf(pan)).toMatchObject({ kind: "statement", commitment: commitmentOf(opening, statement) });
    const par = statementLeaf({ signerSpki: spki, opening, statement, par: "A".repeat(29) });
    expect(parseLeaf(par)).toMatchObject({ kind: "par-statement", parTag: parTagOf("A".repeat(29)) });
    expect(() => commitmentOf(new Uint8Array(15), statement)).toThrow(RangeError);
    expect(parseLeaf(new Uint8Array([1, 2, 3]))).toBeUndefined();
  });
});

describe("tiles", () => {
  it("gives the same roots and proofs as the whole tree, across tile boundaries, appended in batches", async () => {
    const tiles = new MemoryTiles();
    const tree = new MemoryTree([], nodeSha256);
    let size = 0;
    for (const batch of [1, 254, 1, 300, 65_536 - 556, 700]) {
      const hashes = Array.from({ length: batch }, (_, i) =>
        leafHash(new Uint8Array([(size + i) % 251, (size + i) >> 8]), nodeSha256),
      );
      const result = await appendToTiles(tiles, size, hashes, nodeSha256);
      tiles.write(result.tiles);
      for (const h of hashes) tree.append(h);
      size = result.size;
      expect(await rootFromTiles(tiles, size, nodeSha256)).toEqual(tree.root(size));
    }
    for (const [index, at] of [
      [0, 1],
      [255, 256],
      [256, 66_000],
      [65_535, 65_536],
      [65_536, 66_236],
      [66_235, 66_236],
    ]) {
      expect(await inclusionProofFromTiles(tiles, index as number, at as number, nodeSha256)).toEqual(
        tree.inclusionProof(index as number, at as number),
      );
    }
    for (const [old, at] of [
      [1, 256],
      [256, 257],
      [255, 65_537],
      [66_000, 66_236],
    ]) {
      if ((old as number) > (at as number)) continue;
      expect(await consistencyProofFromTiles(tiles, old as number, at as number, nodeSha256)).toEqual(
        tree.consistencyProof(old as number, at as number),
      );
    }
    expect(() => tiles.write([{ level: 0, index: 0, hashes: new Uint8Array(32) }])).toThrow("rewritten");
    expect(tilePath(0, 1_234_067)).toBe("tile/0/x001/x234/067");
    expect(tilePath(1, 5, 17)).toBe("tile/1/005.p/17");
  });
});
