import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SubtreeLru } from "../../src/domain/kt/tile-cache.js";
import { leafHash, MemoryTree } from "../../src/kt/merkle.js";
import {
  appendToTiles,
  consistencyProofFromTiles,
  inclusionProofFromTiles,
  MemoryTiles,
  type TileReader,
  type TileRequest,
} from "../../src/kt/tiles.js";
import { nodeSha256 } from "./support.js";

/**
 * The proof cache: complete subtrees' hashes kept between proofs. Proofs with the memo are the
 * proofs without it (against the whole tree in memory) while the tree grows under the same memo, and
 * a proof asked again reads no tile for the subtrees the memo kept.
 */

class CountingTiles implements TileReader {
  hashesRead = 0;
  constructor(private readonly inner: TileReader) {}
  async readTiles(requests: TileRequest[]): Promise<Uint8Array[]> {
    this.hashesRead += requests.reduce((n, r) => n + r.width, 0);
    return this.inner.readTiles(requests);
  }
}

function leaves(from: number, count: number): Uint8Array[] {
  return Array.from({ length: count }, (_, i) =>
    leafHash(new Uint8Array([(from + i) % 251, (from + i) >> 8, (from + i) >> 16]), nodeSha256),
  );
}

describe("the subtree memo", () => {
  it("gives the tree's own proofs while the tree grows under one memo", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.integer({ min: 1, max: 1_500 }), { minLength: 1, maxLength: 4 }),
        fc.array(fc.tuple(fc.nat(), fc.nat()), { minLength: 1, maxLength: 12 }),
        async (batches, asks) => {
          const tiles = new MemoryTiles();
          const tree = new MemoryTree([], nodeSha256);
          const memo = new SubtreeLru(64);
          let size = 0;
          for (const batch of batches) {
            const hashes = leaves(size, batch);
            const appended = await appendToTiles(tiles, size, hashes, nodeSha256);
            tiles.write(appended.tiles);
            for (const h of hashes) tree.append(h);
            size = appended.size;
            for (const [a, b] of asks) {
              const at = 1 + (b % size);
              const index = a % at;
              expect(await inclusionProofFromTiles(tiles, index, at, nodeSha256, memo)).toEqual(
                tree.inclusionProof(index, at),
              );
              if (index > 0) {
                expect(await consistencyProofFromTiles(tiles, index, at, nodeSha256, memo)).toEqual(
                  tree.consistencyProof(index, at),
                );
              }
            }
          }
        },
      ),
      { numRuns: 15 },
    );
  });

  it("reads no tile again for the subtrees it kept", async () => {
    const tiles = new MemoryTiles();
    const size = 70_000;
    tiles.write((await appendToTiles(tiles, 0, leaves(0, size), nodeSha256)).tiles);
    const counting = new CountingTiles(tiles);
    const memo = new SubtreeLru();
    const first = await inclusionProofFromTiles(counting, 12_345, size, nodeSha256, memo);
    const cold = counting.hashesRead;
    counting.hashesRead = 0;
    const again = await inclusionProofFromTiles(counting, 12_345, size, nodeSha256, memo);
    expect(again).toEqual(first);
    // Cold, it reads two full tiles and more; warm, only the tiles of the short subtrees.
    expect(cold).toBeGreaterThan(2 * 256);
    expect(counting.hashesRead).toBeLessThan(cold);
    counting.hashesRead = 0;
    await inclusionProofFromTiles(counting, 12_345, size, nodeSha256);
    expect(counting.hashesRead).toBe(cold);
  });

  it("keeps at most its bound, dropping the least recently used", () => {
    const memo = new SubtreeLru(2);
    const h = (n: number) => new Uint8Array(32).fill(n);
    memo.set(4, 0, h(1));
    memo.set(4, 1, h(2));
    expect(memo.get(4, 0)).toEqual(h(1));
    memo.set(5, 0, h(3));
    expect(memo.get(4, 1)).toBeUndefined();
    expect(memo.get(4, 0)).toEqual(h(1));
    expect(memo.get(5, 0)).toEqual(h(3));
    // Level and index are one key each way: (4, 1) is not (5, 0) nor (1, 4).
    expect(memo.get(1, 4)).toBeUndefined();
  });
});
