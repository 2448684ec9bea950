import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { toHex } from "../../src/kt/bytes.js";
import {
  consistencyRanges,
  emptyRoot,
  foldRange,
  inclusionRanges,
  isPowerOfTwo,
  isTreeNumber,
  leafHash,
  MAX_PROOF_HASHES,
  MemoryTree,
  nodeHash,
  rangeNodes,
  rootFromInclusionProof,
  rootOf,
  splitPoint,
  verifyConsistency,
  verifyInclusion,
} from "../../src/kt/merkle.js";

/**
 * The Merkle proofs from the forger's side, on small trees (fast: merkle.test.ts holds the reference
 * probes and the sweeps up to 64 leaves). The oracle is RFC 9162 section 2.1 written out here
 * recursively, with Node's SHA-256, not the code under test: MTH, PATH and PROOF exactly as the RFC
 * defines them. Every forged proof is one an attacker can send: a proof of the wrong length, a wrong
 * index or size, hashes split at other places so the same bytes are hashed, a proof for a root made up
 * to match a shortened or lengthened walk.
 */

const sha = (...parts: Uint8Array[]) =>
  new Uint8Array(createHash("sha256").update(Buffer.concat(parts)).digest());
const H_LEAF = (data: Uint8Array) => sha(new Uint8Array([0]), data);
const H_NODE = (left: Uint8Array, right: Uint8Array) => sha(new Uint8Array([1]), left, right);

/** Largest power of two strictly below n. */
function k(n: number): number {
  let p = 1;
  while (p * 2 < n) p *= 2;
  return p;
}

/** RFC 9162 MTH over leaf data. */
function mth(d: Uint8Array[]): Uint8Array {
  if (d.length === 0) return sha();
  if (d.length === 1) return H_LEAF(d[0] as Uint8Array);
  const split = k(d.length);
  return H_NODE(mth(d.slice(0, split)), mth(d.slice(split)));
}

/** RFC 9162 PATH(m, D[n]). */
function path(m: number, d: Uint8Array[]): Uint8Array[] {
  if (d.length <= 1) return [];
  const split = k(d.length);
  return m < split
    ? [...path(m, d.slice(0, split)), mth(d.slice(split))]
    : [...path(m - split, d.slice(split)), mth(d.slice(0, split))];
}

/** RFC 9162 SUBPROOF(m, D[n], b). */
function subproof(m: number, d: Uint8Array[], b: boolean): Uint8Array[] {
  if (m === d.length) return b ? [] : [mth(d)];
  const split = k(d.length);
  return m <= split
    ? [...subproof(m, d.slice(0, split), b), mth(d.slice(split))]
    : [...subproof(m - split, d.slice(split), false), mth(d.slice(0, split))];
}

const MAX = 17;
const data = Array.from({ length: MAX }, (_, i) => new TextEncoder().encode(`leaf ${i}`));
const refRoots = Array.from({ length: MAX + 1 }, (_, n) => mth(data.slice(0, n)));
const L = data.map(H_LEAF);
const tree = new MemoryTree(data.map((leaf) => leafHash(leaf)));
const hexes = (list: Uint8Array[]) => list.map(toHex);
/** A 32-byte hash that is no node of these trees. */
const stranger = sha(new TextEncoder().encode("not in any tree"));

describe("hashing and proofs, against RFC 9162 written out", () => {
  it("hashes leaves, nodes and the empty tree as the RFC", () => {
    expect(toHex(emptyRoot())).toBe(toHex(sha()));
    expect(toHex(leafHash(data[3] as Uint8Array))).toBe(toHex(L[3] as Uint8Array));
    expect(toHex(nodeHash(L[0] as Uint8Array, L[1] as Uint8Array))).toBe(
      toHex(H_NODE(L[0] as Uint8Array, L[1] as Uint8Array)),
    );
    expect(toHex(rootOf([]))).toBe(toHex(sha()));
    expect(toHex(rootOf(L.slice(0, 5)))).toBe(toHex(refRoots[5] as Uint8Array));
  });

  it("gives every root, inclusion proof and consistency proof of trees up to 17 leaves as the RFC", () => {
    for (let n = 0; n <= MAX; n++) {
      expect(toHex(tree.root(n)), `root ${n}`).toBe(toHex(refRoots[n] as Uint8Array));
      for (let m = 0; m < n; m++) {
        const proof = path(m, data.slice(0, n));
        expect(hexes(tree.inclusionProof(m, n)), `${m} of ${n}`).toEqual(hexes(proof));
        expect(
          verifyInclusion(m, n, L[m] as Uint8Array, proof, refRoots[n] as Uint8Array),
          `${m} of ${n}`,
        ).toBe(true);
        expect(toHex(tree.leaf(m))).toBe(toHex(L[m] as Uint8Array));
      }
      for (let m = 1; m <= n; m++) {
        const proof = subproof(m, data.slice(0, n), true);
        expect(hexes(tree.consistencyProof(m, n)), `${m} -> ${n}`).toEqual(hexes(proof));
        const ok = verifyConsistency(m, n, refRoots[m] as Uint8Array, refRoots[n] as Uint8Array, proof);
        expect(ok, `${m} -> ${n}`).toBe(true);
      }
    }
  });

  it("knows its split points, powers of two and tree numbers", () => {
    expect([2, 3, 4, 5, 8, 9, 16, 17].map(splitPoint)).toEqual([1, 2, 2, 4, 4, 8, 8, 16]);
    expect([0, 1, 2, 3, 4, 6, 8, 12, 2 ** 40, -4].map(isPowerOfTwo)).toEqual([
      false,
      true,
      true,
      false,
      true,
      false,
      true,
      false,
      true,
      false,
    ]);
    expect([0, 1, 2 ** 53 - 1].every(isTreeNumber)).toBe(true);
    expect([-1, 1.5, 2 ** 53, Number.NaN, Number.POSITIVE_INFINITY, "3", 3n, null].some(isTreeNumber)).toBe(
      false,
    );
  });

  it("splits ranges into complete subtrees and folds them right to left", () => {
    expect(rangeNodes({ start: 0, end: 7 })).toEqual([
      [2, 0],
      [1, 2],
      [0, 6],
    ]);
    expect(rangeNodes({ start: 4, end: 6 })).toEqual([[1, 2]]);
    expect(rangeNodes({ start: 8, end: 16 })).toEqual([[3, 1]]);
    expect(rangeNodes({ start: 3, end: 4 })).toEqual([[0, 3]]);
    expect(rangeNodes({ start: 5, end: 5 })).toEqual([]);
    // A range that does not start at a multiple of its widest subtree: [2, 4) then [4, 8).
    expect(rangeNodes({ start: 2, end: 8 })).toEqual([
      [1, 1],
      [2, 1],
    ]);
    expect(rangeNodes({ start: 6, end: 16 })).toEqual([
      [1, 3],
      [3, 1],
    ]);
    const [a, b, c] = L as [Uint8Array, Uint8Array, Uint8Array];
    expect(toHex(foldRange([a, b, c]))).toBe(toHex(H_NODE(a, H_NODE(b, c))));
    expect(toHex(foldRange([a]))).toBe(toHex(a));
    expect(() => foldRange([])).toThrow(new RangeError("an empty range has no hash"));
  });

  it("refuses impossible requests, saying which", () => {
    expect(() => inclusionRanges(8, 8)).toThrow(new RangeError("no leaf 8 in a tree of 8"));
    expect(() => inclusionRanges(-1, 8)).toThrow(RangeError);
    expect(() => inclusionRanges(0, 1.5)).toThrow(RangeError);
    expect(() => consistencyRanges(9, 8)).toThrow(new RangeError("no consistency proof from 9 to 8"));
    expect(() => consistencyRanges(-1, 8)).toThrow(RangeError);
    expect(() => consistencyRanges(1, 2.5)).toThrow(RangeError);
    const small = new MemoryTree(L.slice(0, 8));
    expect(small.size).toBe(8);
    expect(() => small.root(9)).toThrow(new RangeError("no tree of 9 leaves here"));
    expect(() => small.root(-1)).toThrow(new RangeError("no tree of -1 leaves here"));
    expect(() => small.root(2.5)).toThrow(RangeError);
    expect(() => small.inclusionProof(0, 9)).toThrow(new RangeError("no tree of 9 leaves here"));
    expect(() => small.consistencyProof(1, 9)).toThrow(new RangeError("no tree of 9 leaves here"));
    expect(() => small.leaf(8)).toThrow(new RangeError("no complete subtree (0, 8)"));
    expect(() => small.rangeHash({ start: 0, end: 9 })).toThrow(new RangeError("no complete subtree (0, 8)"));
    expect(() => small.rangeHash({ start: 0, end: 16 })).toThrow(
      new RangeError("no complete subtree (4, 0)"),
    );
    expect(new MemoryTree().size).toBe(0);
    expect(toHex(new MemoryTree().root())).toBe(toHex(sha()));
    expect(consistencyRanges(0, 8)).toEqual([]);
    expect(consistencyRanges(0, 0)).toEqual([]);
    expect(consistencyRanges(8, 8)).toEqual([]);
  });
});

describe("forged inclusion proofs", () => {
  it("refuses every other index, size, element and length of every proof up to 17 leaves", () => {
    const passed: string[] = [];
    for (let n = 1; n <= MAX; n++) {
      const root = refRoots[n] as Uint8Array;
      for (let m = 0; m < n; m++) {
        const proof = path(m, data.slice(0, n));
        const leaf = L[m] as Uint8Array;
        const check = (ok: boolean, what: string) => ok && passed.push(`${m} of ${n}: ${what}`);
        for (let other = 0; other <= MAX + 1; other++) {
          if (other !== m) check(verifyInclusion(other, n, leaf, proof, root), `index ${other}`);
          if (other !== n && other <= MAX)
            check(verifyInclusion(m, other, leaf, proof, refRoots[other] as Uint8Array), `size ${other}`);
        }
        for (let i = 0; i < proof.length; i++) {
          const bad = proof.slice();
          bad[i] = stranger;
          check(verifyInclusion(m, n, leaf, bad, root), `element ${i}`);
        }
        check(verifyInclusion(m, n, stranger, proof, root), "leaf");
        check(verifyInclusion(m, n, leaf, [...proof, stranger], root), "longer");
        if (proof.length > 0) check(verifyInclusion(m, n, leaf, proof.slice(0, -1), root), "shorter");
      }
    }
    expect(passed).toEqual([]);
  });

  it("refuses a proof of the wrong length even for the root its walk leads to", () => {
    const [l0, l1, l2, l3] = L as [Uint8Array, Uint8Array, Uint8Array, Uint8Array];
    const n01 = H_NODE(l0, l1);
    // Too short: leaf 0 of 4 with one hash walks to the node of leaves 0-1, which is no root of 4.
    expect(verifyInclusion(0, 4, l0, [l1], n01)).toBe(false);
    expect(rootFromInclusionProof(0, 4, l0, [l1])).toBeUndefined();
    // Too long: leaf 0 of a tree of 1 with one hash more, for the root that extra hash makes.
    expect(verifyInclusion(0, 1, l0, [l1], H_NODE(l1, l0))).toBe(false);
    expect(verifyInclusion(0, 1, l0, [l1], H_NODE(l0, l1))).toBe(false);
    expect(rootFromInclusionProof(0, 1, l0, [l1])).toBeUndefined();
    expect(verifyInclusion(2, 3, l2, [n01, l3], H_NODE(l3, H_NODE(n01, l2)))).toBe(false);
    expect(toHex(rootFromInclusionProof(0, 1, l0, []) as Uint8Array)).toBe(toHex(l0));
  });

  it("refuses hashes that are not 32-byte arrays, however the bytes are split", () => {
    const [l0, l1, l2, l3] = L as [Uint8Array, Uint8Array, Uint8Array, Uint8Array];
    const [n01, n23] = [H_NODE(l0, l1), H_NODE(l2, l3)];
    const root4 = H_NODE(n01, n23);
    const both = new Uint8Array([...n01, ...n23]);
    // "Leaf 0 of 2" whose leaf hash is both children of the root, and an empty sibling: the same 65
    // bytes are hashed as for the root of 4.
    expect(verifyInclusion(0, 2, both, [new Uint8Array(0)], root4)).toBe(false);
    expect(rootFromInclusionProof(0, 2, both, [new Uint8Array(0)])).toBeUndefined();
    expect(rootFromInclusionProof(0, 1, l0.subarray(0, 31), [])).toBeUndefined();
    expect(rootFromInclusionProof(0, 2, l0, [l1.subarray(0, 31)])).toBeUndefined();
    expect(rootFromInclusionProof(0, 2, l0, [new Uint8Array([...l1, 0])])).toBeUndefined();
    // Its own bytes as a plain array (as JSON would give them) are not a hash.
    expect(verifyInclusion(0, 2, l0, [Array.from(l1) as unknown as Uint8Array], H_NODE(l0, l1))).toBe(false);
    expect(verifyInclusion(0, 2, l0, [l1], H_NODE(l0, l1))).toBe(true);
  });

  it("refuses proofs past the longest any tree can need, and sizes and indexes that are not tree numbers", () => {
    const many = Array.from({ length: MAX_PROOF_HASHES + 1 }, () => stranger);
    expect(rootFromInclusionProof(0, 2 ** 53 - 1, L[0] as Uint8Array, many)).toBeUndefined();
    // Leaf 0's own proof walks "always left", as index -1 or 0.5 would, and a size of 8.5 halves to
    // the same steps as 8: none of them is a leaf or a tree.
    const first = path(0, data.slice(0, 8));
    const [l0, root8] = [L[0] as Uint8Array, refRoots[8] as Uint8Array];
    expect(verifyInclusion(0, 8, l0, first, root8)).toBe(true);
    for (const [index, size] of [
      [-1, 8],
      [0.5, 8],
      [0, 8.5],
      [-0.5, 8],
    ] as const) {
      expect(verifyInclusion(index, size, l0, first, root8), `${index} of ${size}`).toBe(false);
      expect(rootFromInclusionProof(index, size, l0, first), `${index} of ${size}`).toBeUndefined();
    }
    const proof = path(3, data.slice(0, 8));
    for (const bad of [-1, 3.5, Number.NaN, 2 ** 53]) {
      expect(verifyInclusion(bad, 8, L[3] as Uint8Array, proof, refRoots[8] as Uint8Array)).toBe(false);
      expect(verifyInclusion(3, bad, L[3] as Uint8Array, proof, refRoots[8] as Uint8Array)).toBe(false);
    }
    expect(verifyInclusion(8, 8, L[3] as Uint8Array, proof, refRoots[8] as Uint8Array)).toBe(false);
  });
});

describe("forged consistency proofs", () => {
  it("refuses every other old size, size, element, root and length of every proof up to 17 leaves", () => {
    const passed: string[] = [];
    for (let n = 2; n <= MAX; n++) {
      for (let m = 1; m < n; m++) {
        const proof = subproof(m, data.slice(0, n), true);
        const [r1, r2] = [refRoots[m] as Uint8Array, refRoots[n] as Uint8Array];
        const check = (ok: boolean, what: string) => ok && passed.push(`${m} -> ${n}: ${what}`);
        for (let other = 0; other <= MAX; other++) {
          if (other !== m)
            check(verifyConsistency(other, n, refRoots[other] as Uint8Array, r2, proof), `old ${other}`);
          if (other !== n)
            check(verifyConsistency(m, other, r1, refRoots[other] as Uint8Array, proof), `size ${other}`);
        }
        for (let i = 0; i < proof.length; i++) {
          const bad = proof.slice();
          bad[i] = stranger;
          check(verifyConsistency(m, n, r1, r2, bad), `element ${i}`);
        }
        check(verifyConsistency(m, n, stranger, r2, proof), "old root");
        check(verifyConsistency(m, n, r1, stranger, proof), "root");
        check(verifyConsistency(m, n, r1, r2, [...proof, stranger]), "longer");
        check(verifyConsistency(m, n, r1, r2, proof.slice(0, -1)), "shorter");
        check(verifyConsistency(m, n, r1, r2, []), "empty");
      }
    }
    expect(passed).toEqual([]);
  });

  it("needs an empty proof and equal roots for equal sizes, and refuses any proof from the empty tree", () => {
    const r4 = refRoots[4] as Uint8Array;
    expect(verifyConsistency(4, 4, r4, r4, [])).toBe(true);
    expect(verifyConsistency(4, 4, r4, r4, [stranger])).toBe(false);
    expect(verifyConsistency(4, 4, r4, refRoots[5] as Uint8Array, [])).toBe(false);
    expect(verifyConsistency(0, 0, sha(), sha(), [])).toBe(false);
    const [l0, l1] = L as [Uint8Array, Uint8Array];
    const n23 = H_NODE(L[2] as Uint8Array, L[3] as Uint8Array);
    // From size 0 the walk of [l0, l1, n23] would lead to the root of 4 with "old root" l0.
    expect(verifyConsistency(0, 4, l0, r4, [l0, l1, n23])).toBe(false);
    expect(verifyConsistency(0, 4, sha(), r4, [])).toBe(false);
    expect(verifyConsistency(5, 4, refRoots[5] as Uint8Array, r4, [stranger])).toBe(false);
    // An "old" tree larger than the new one, with a proof whose walk ends on both roots given.
    expect(verifyConsistency(3, 2, l0, H_NODE(l0, l1), [l0, l1])).toBe(false);
    expect(verifyConsistency(1.5, 4, l0, r4, [l1, n23])).toBe(false);
    expect(verifyConsistency(1, 4.5, l0, r4, [l1, n23])).toBe(false);
    expect(verifyConsistency(-1, 4, l0, r4, [l1, n23])).toBe(false);
    expect(verifyConsistency(1, 4, l0, r4, [l1, n23])).toBe(true);
  });

  it("refuses a proof of the wrong length even for the roots its walk leads to", () => {
    const [l0, l1, l2, l3] = L as [Uint8Array, Uint8Array, Uint8Array, Uint8Array];
    const [n01, n23] = [H_NODE(l0, l1), H_NODE(l2, l3)];
    // 3 -> 4 is [l2, l3, n01]; cut after two hashes the walk is at old "l2" and new "n23".
    expect(verifyConsistency(3, 4, H_NODE(n01, l2), H_NODE(n01, n23), [l2, l3, n01])).toBe(true);
    expect(verifyConsistency(3, 4, l2, n23, [l2, l3])).toBe(false);
    // One hash past the end, with both roots made up to match the longer walk.
    const x = stranger;
    const [r1, r2] = [refRoots[3] as Uint8Array, refRoots[4] as Uint8Array];
    expect(verifyConsistency(3, 4, H_NODE(x, r1), H_NODE(x, r2), [l2, l3, n01, x])).toBe(false);
    expect(verifyConsistency(2, 4, H_NODE(x, n01), H_NODE(x, r2), [n23, x])).toBe(false);
  });

  it("refuses hashes that are not 32-byte arrays, however the bytes are split", () => {
    const [l0, l1, l2, l3] = L as [Uint8Array, Uint8Array, Uint8Array, Uint8Array];
    const [n01, n23] = [H_NODE(l0, l1), H_NODE(l2, l3)];
    // The walk of 3 -> 4 over [l2 || l3, "", n01] hashes the same bytes for the new root as the honest
    // proof does; its "old root" is a node over n01, l2 and l3 that no tree of 3 has.
    const fakeOld = sha(new Uint8Array([1]), n01, l2, l3);
    const split = [new Uint8Array([...l2, ...l3]), new Uint8Array(0), n01];
    expect(verifyConsistency(3, 4, fakeOld, H_NODE(n01, n23), split)).toBe(false);
    const plain = [l2, l3, Array.from(n01) as unknown as Uint8Array];
    expect(verifyConsistency(3, 4, H_NODE(n01, l2), H_NODE(n01, n23), plain)).toBe(false);
    const many = Array.from({ length: MAX_PROOF_HASHES + 1 }, () => stranger);
    expect(verifyConsistency(3, 2 ** 53 - 1, refRoots[3] as Uint8Array, stranger, many)).toBe(false);
  });
});
