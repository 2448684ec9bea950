import { readFileSync } from "node:fs";
import { RFC9162 } from "@transmute/rfc9162";
import { describe, expect, it } from "vitest";
import { toHex } from "../../src/kt/bytes.js";
import {
  consistencyRanges,
  emptyRoot,
  inclusionRanges,
  leafHash,
  MemoryTree,
  nodeHash,
  rootFromInclusionProof,
  rootOf,
  verifyConsistency,
  verifyInclusion,
} from "../../src/kt/merkle.js";
import { nodeSha256 as serverSha256 } from "../../src/kt/node-engine.js";
import { b64, flipBit, hex, nodeSha256 } from "./support.js";

/**
 * The Merkle code against the RFC 6962 reference data and a second implementation.
 *
 * Reference data: the leaf inputs, node and root hashes of transparency-dev/merkle's
 * testonly/constants.go and the hasher vectors of its rfc6962/rfc6962_test.go (the certificate
 * transparency reference code, formerly certificate-transparency-go's merkle tests), and the 196
 * inclusion and consistency probes of its testdata/ (copied whole into fixtures/rfc6962-probes.json
 * with the commit they came from).
 *
 * Second implementation: @transmute/rfc9162 0.0.5 (a devDependency only), a direct transcription of
 * RFC 9162's recursive MTH, PATH and PROOF. It agrees with ours on every root and inclusion proof. Its
 * consistency proofs differ from RFC 9162 in one known way: `SUBPROOF(m, D[m], true)` gives
 * `[MTH(D[m])]` instead of `[]`, so when the old size is a power of two its proof starts with the old
 * root, and its verifier (which skips the RFC's "prepend first_hash" step) expects that. The test
 * checks exactly that relation in both directions.
 */

const leaves = [
  "",
  "00",
  "10",
  "2021",
  "3031",
  "40414243",
  "5051525354555657",
  "606162636465666768696a6b6c6d6e6f",
].map(hex);
const roots = [
  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
  "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
  "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
  "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
  "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
  "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
  "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
  "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
  "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
];

interface Probe {
  file: string;
  desc: string;
  wantErr: boolean;
  proof: string[] | null;
  leafIdx?: number;
  treeSize?: number;
  root?: string | null;
  leafHash?: string | null;
  size1?: number;
  size2?: number;
  root1?: string | null;
  root2?: string | null;
}
const probes = JSON.parse(readFileSync(new URL("fixtures/rfc6962-probes.json", import.meta.url), "utf8")) as {
  inclusion: Probe[];
  consistency: Probe[];
};
const bytesOf = (text: string | null | undefined): Uint8Array => b64(text ?? "");

describe("RFC 6962 hashing", () => {
  it("hashes as the reference vectors", () => {
    expect(toHex(emptyRoot())).toBe("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect(toHex(leafHash(new Uint8Array(0)))).toBe(
      "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    );
    expect(toHex(leafHash(new TextEncoder().encode("L123456")))).toBe(
      "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56",
    );
    const n = new TextEncoder();
    expect(toHex(nodeHash(n.encode("N123"), n.encode("N456")))).toBe(
      "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb",
    );
  });

  it("gives the reference root of every prefix of the reference leaves", () => {
    const hashes = leaves.map((leaf) => leafHash(leaf));
    for (let size = 0; size <= 8; size++) expect(toHex(rootOf(hashes.slice(0, size)))).toBe(roots[size]);
    const tree = new MemoryTree(hashes);
    for (let size = 0; size <= 8; size++) expect(toHex(tree.root(size))).toBe(roots[size]);
  });

  it("answers every reference inclusion probe as expected", () => {
    expect(probes.inclusion.length).toBe(98);
    for (const p of probes.inclusion) {
      const ok = verifyInclusion(
        p.leafIdx as number,
        p.treeSize as number,
        bytesOf(p.leafHash),
        (p.proof ?? []).map(b64),
        bytesOf(p.root),
      );
      expect(ok, `${p.file}: ${p.desc}`).toBe(!p.wantErr);
    }
  });

  it("answers every reference consistency probe as expected", () => {
    expect(probes.consistency.length).toBe(98);
    for (const p of probes.consistency) {
      const ok = verifyConsistency(
        p.size1 as number,
        p.size2 as number,
        bytesOf(p.root1),
        bytesOf(p.root2),
        (p.proof ?? []).map(b64),
      );
      expect(ok, `${p.file}: ${p.desc}`).toBe(!p.wantErr);
    }
  });

  it("builds exactly the reference proofs of every happy-path probe", () => {
    const tree = new MemoryTree(leaves.map((leaf) => leafHash(leaf)));
    const happy = (p: Probe) => p.desc === "happy path" && (p.treeSize ?? p.size2 ?? 99) <= 8;
    const inclusion = probes.inclusion.filter(happy);
    const consistency = probes.consistency.filter(happy);
    expect(inclusion.length + consistency.length).toBeGreaterThan(4);
    for (const p of inclusion) {
      const proof = tree.inclusionProof(p.leafIdx as number, p.treeSize as number).map(toHex);
      expect(proof, p.file).toEqual((p.proof ?? []).map((h) => toHex(b64(h))));
    }
    for (const p of consistency) {
      const proof = tree.consistencyProof(p.size1 as number, p.size2 as number).map(toHex);
      expect(proof, p.file).toEqual((p.proof ?? []).map((h) => toHex(b64(h))));
    }
  });
});

/** 64 distinct leaves. */
const data = Array.from({ length: 64 }, (_, i) => new TextEncoder().encode(`leaf ${i}`));

// The cross-checks and the tampering runs do a few hundred thousand verifications (and the second
// implementation recomputes every subtree of every proof): seconds alone, much longer beside a loaded
// suite, so these tests get room to finish. Nothing in them measures time.
const HEAVY_TEST_TIMEOUT = 180_000;

describe("every tree size and index up to 64, against @transmute/rfc9162", () => {
  const tree = new MemoryTree(data.map((leaf) => leafHash(leaf)));

  it("agrees on every root", async () => {
    for (let size = 0; size <= 64; size++) {
      const theirs = await RFC9162.treeHead(data.slice(0, size));
      expect(toHex(tree.root(size)), `size ${size}`).toBe(toHex(theirs));
    }
  });

  it(
    "agrees on every inclusion proof, and each side verifies the other's",
    async () => {
      for (let size = 1; size <= 64; size++) {
        const root = tree.root(size);
        for (let index = 0; index < size; index++) {
          const ours = tree.inclusionProof(index, size);
          const theirs = await RFC9162.PATH(index, data.slice(0, size));
          expect(ours.map(toHex), `${index} of ${size}`).toEqual(theirs.map(toHex));
          expect(verifyInclusion(index, size, tree.leaf(index), ours, root)).toBe(true);
          const proof = { log_id: "", tree_size: size, leaf_index: index, inclusion_path: ours };
          expect(await RFC9162.verifyInclusionProof(root, tree.leaf(index), proof)).toBe(true);
        }
      }
    },
    HEAVY_TEST_TIMEOUT,
  );

  it(
    "agrees on every consistency proof but for the documented old-root element, both ways",
    async () => {
      for (let size = 1; size <= 64; size++) {
        for (let old = 1; old <= size; old++) {
          const ours = tree.consistencyProof(old, size);
          const theirs = await RFC9162.PROOF(old, data.slice(0, size));
          const oldRoot = tree.root(old);
          const powerOfTwo = (old & (old - 1)) === 0;
          const expected = powerOfTwo || old === size ? [oldRoot, ...ours] : ours;
          expect(theirs.map(toHex), `${old} -> ${size}`).toEqual(expected.map(toHex));
          expect(verifyConsistency(old, size, oldRoot, tree.root(size), ours)).toBe(true);
          if (old < size) {
            const proof = { log_id: "", tree_size_1: old, tree_size_2: size, consistency_path: expected };
            expect(await RFC9162.verifyConsistencyProof(oldRoot, tree.root(size), proof)).toBe(true);
          }
        }
      }
    },
    HEAVY_TEST_TIMEOUT,
  );
});

/** Other indexes and sizes to try in place of `at` in a tree of `size`: the edges and the neighbours. */
function neighbours(at: number, size: number): number[] {
  const all = [
    0,
    1,
    at - 2,
    at - 1,
    at + 1,
    at + 2,
    size - 2,
    size - 1,
    size,
    size + 1,
    size + 2,
    2 * size,
    63,
    64,
  ];
  return [...new Set(all)].filter((n) => n >= 0 && n <= 64);
}

describe("tampering", () => {
  const tree = new MemoryTree(
    data.map((leaf) => leafHash(leaf, nodeSha256)),
    nodeSha256,
  );
  const roots = Array.from({ length: 65 }, (_, n) => tree.root(n));
  const verify = (i: number, n: number, leaf: Uint8Array, proof: Uint8Array[], root: Uint8Array) =>
    verifyInclusion(i, n, leaf, proof, root, nodeSha256);
  // Every bit of every hash for trees up to 8 leaves; above, every 37th bit (7 bits a hash, each in
  // another byte and at another place in it), which keeps the test within seconds on a busy machine.
  // Passes are collected, not asserted one by one.
  const stepFor = (size: number) => (size <= 8 ? 1 : 37);

  it(
    "fails an inclusion proof with any bit of a hash, the leaf, the index or the size changed",
    () => {
      const passed: string[] = [];
      let checks = 0;
      const expectFail = (ok: boolean, what: string) => {
        checks++;
        if (ok) passed.push(what);
      };
      for (let size = 1; size <= 64; size++) {
        const root = roots[size] as Uint8Array;
        for (let index = 0; index < size; index++) {
          const proof = tree.inclusionProof(index, size);
          const leaf = tree.leaf(index);
          const at = `${index} of ${size}`;
          expect(verify(index, size, leaf, proof, root), at).toBe(true);
          for (let h = 0; h < proof.length; h++) {
            for (let bit = 0; bit < 256; bit += stepFor(size)) {
              const bad = proof.slice();
              bad[h] = flipBit(proof[h] as Uint8Array, bit);
              expectFail(verify(index, size, leaf, bad, root), `${at}: hash ${h} bit ${bit}`);
            }
          }
          for (let bit = 0; bit < 256; bit += stepFor(size)) {
            expectFail(verify(index, size, flipBit(leaf, bit), proof, root), `${at}: leaf bit ${bit}`);
          }
          for (const other of neighbours(index, size)) {
            if (other !== index) expectFail(verify(other, size, leaf, proof, root), `${at}: index ${other}`);
            // A size read with a root it does not belong to can pass when the proof's shape is the
            // same (leaf 0 of 3 and of 4): the checkpoint binds size and root together, and the
            // verifier takes both from it. Here the size changes with its own tree's root.
            if (other !== size)
              expectFail(
                verify(index, other, leaf, proof, roots[other] as Uint8Array),
                `${at}: size ${other}`,
              );
          }
          if (proof.length > 0) expectFail(verify(index, size, leaf, proof.slice(1), root), `${at}: shorter`);
          expectFail(verify(index, size, leaf, [...proof, leaf], root), `${at}: longer`);
        }
      }
      expect(passed).toEqual([]);
      expect(checks).toBeGreaterThan(50_000);
    },
    HEAVY_TEST_TIMEOUT,
  );

  it(
    "fails a consistency proof with any bit of a hash, a root or a size changed",
    () => {
      const passed: string[] = [];
      const verify = (m: number, n: number, r1: Uint8Array, r2: Uint8Array, p: Uint8Array[]) =>
        verifyConsistency(m, n, r1, r2, p, nodeSha256);
      const expectFail = (ok: boolean, what: string) => {
        if (ok) passed.push(what);
      };
      for (let size = 2; size <= 64; size++) {
        for (let old = 1; old < size; old++) {
          const proof = tree.consistencyProof(old, size);
          const [oldRoot, root] = [roots[old] as Uint8Array, roots[size] as Uint8Array];
          const at = `${old} -> ${size}`;
          expect(verify(old, size, oldRoot, root, proof), at).toBe(true);
          for (let h = 0; h < proof.length; h++) {
            for (let bit = 0; bit < 256; bit += stepFor(size)) {
              const bad = proof.slice();
              bad[h] = flipBit(proof[h] as Uint8Array, bit);
              expectFail(verify(old, size, oldRoot, root, bad), `${at}: hash ${h} bit ${bit}`);
            }
          }
          for (let bit = 0; bit < 256; bit += stepFor(size)) {
            expectFail(verify(old, size, flipBit(oldRoot, bit), root, proof), `${at}: old root bit ${bit}`);
            expectFail(verify(old, size, oldRoot, flipBit(root, bit), proof), `${at}: root bit ${bit}`);
          }
          for (const other of neighbours(old, size)) {
            if (other !== old)
              expectFail(verify(other, size, roots[other] as Uint8Array, root, proof), `${at}: old ${other}`);
            if (other !== size)
              expectFail(
                verify(old, other, oldRoot, roots[other] as Uint8Array, proof),
                `${at}: size ${other}`,
              );
          }
          expectFail(verify(old, size, oldRoot, root, proof.slice(1)), `${at}: shorter`);
          expectFail(verify(old, size, oldRoot, root, [...proof, root]), `${at}: longer`);
        }
      }
      expect(passed).toEqual([]);
    },
    HEAVY_TEST_TIMEOUT,
  );

  it("refuses sizes and indexes that are not safe integers, and hashes of the wrong length", () => {
    const proof = tree.inclusionProof(3, 8);
    const [leaf, root] = [tree.leaf(3), tree.root(8)];
    for (const bad of [-1, 3.5, Number.NaN, 2 ** 53, Number.POSITIVE_INFINITY]) {
      expect(verify(bad, 8, leaf, proof, root)).toBe(false);
      expect(verify(3, bad, leaf, proof, root)).toBe(false);
    }
    expect(rootFromInclusionProof(3, 8, leaf, [...proof.slice(0, 2), new Uint8Array(31)])).toBeUndefined();
    expect(verify(3, 8, leaf.subarray(0, 31), proof, root)).toBe(false);
  });
});

describe("proof shapes", () => {
  it("gives ranges that start where RFC 9162 says, and refuses impossible requests", () => {
    expect(inclusionRanges(0, 1)).toEqual([]);
    expect(inclusionRanges(6, 7)).toEqual([
      { start: 4, end: 6 },
      { start: 0, end: 4 },
    ]);
    expect(consistencyRanges(4, 8)).toEqual([{ start: 4, end: 8 }]);
    expect(consistencyRanges(3, 7)).toEqual([
      { start: 2, end: 3 },
      { start: 3, end: 4 },
      { start: 0, end: 2 },
      { start: 4, end: 7 },
    ]);
    expect(() => inclusionRanges(8, 8)).toThrow(RangeError);
    expect(() => consistencyRanges(9, 8)).toThrow(RangeError);
    expect(consistencyRanges(0, 8)).toEqual([]);
    expect(consistencyRanges(8, 8)).toEqual([]);
  });
});

describe("the injectable hash", () => {
  it("gives the same roots and proofs with the server's native SHA-256 as with the pure one", () => {
    const pure = new MemoryTree(data.map((leaf) => leafHash(leaf)));
    const native = new MemoryTree(
      data.map((leaf) => leafHash(leaf, serverSha256)),
      serverSha256,
    );
    for (let size = 0; size <= 64; size++) expect(toHex(native.root(size))).toBe(toHex(pure.root(size)));
    expect(native.inclusionProof(17, 50).map(toHex)).toEqual(pure.inclusionProof(17, 50).map(toHex));
  });
});
