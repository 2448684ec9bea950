import { base64, fromBase64Strict } from "./bytes.js";
import { defaultSha256, type Sha256 } from "./hash.js";
import { emptyRoot, HASH_BYTES, nodeHash } from "./merkle.js";

/**
 * The compact range of a tree's first `size` leaves: the hashes of its complete subtrees along the
 * right edge, largest first (one per bit set in `size`, at most 64). It is all a monitor needs to keep
 * between runs to check that the leaves it reads next are exactly those of the next checkpoint's tree
 * (RFC 9162 hashing: appending leaf hashes and folding from the right gives the root of the grown
 * tree), instead of every leaf hash it ever read.
 */
export class CompactRange {
  private constructor(
    private count: number,
    private readonly nodes: Uint8Array[],
    private readonly sha256: Sha256,
  ) {}

  /** The empty tree's range. */
  static empty(sha256: Sha256 = defaultSha256): CompactRange {
    return new CompactRange(0, [], sha256);
  }

  /**
   * A range read back from {@link CompactRange.toJson}; undefined when the hashes do not fit the size
   * (one 32-byte hash per bit set in it).
   */
  static fromJson(
    json: { size: number; nodes: string[] },
    sha256: Sha256 = defaultSha256,
  ): CompactRange | undefined {
    if (!Number.isSafeInteger(json.size) || json.size < 0 || !Array.isArray(json.nodes)) return undefined;
    const nodes = json.nodes.map((n) =>
      typeof n === "string" ? fromBase64Strict(n, HASH_BYTES) : undefined,
    );
    if (nodes.some((n) => n === undefined) || nodes.length !== bitsSet(json.size)) return undefined;
    return new CompactRange(json.size, nodes as Uint8Array[], sha256);
  }

  /** Number of leaves covered. */
  get size(): number {
    return this.count;
  }

  /** Appends one leaf hash, merging the subtrees it completes. */
  append(leafHash: Uint8Array): void {
    let node = leafHash;
    let size = this.count;
    while (size % 2 === 1) {
      node = nodeHash(this.nodes.pop() as Uint8Array, node, this.sha256);
      size = Math.floor(size / 2);
    }
    this.nodes.push(node);
    this.count++;
  }

  /** The Merkle Tree Hash of the leaves covered. */
  root(): Uint8Array {
    if (this.nodes.length === 0) return emptyRoot(this.sha256);
    let root = this.nodes[this.nodes.length - 1] as Uint8Array;
    for (let i = this.nodes.length - 2; i >= 0; i--)
      root = nodeHash(this.nodes[i] as Uint8Array, root, this.sha256);
    return root;
  }

  toJson(): { size: number; nodes: string[] } {
    return { size: this.count, nodes: this.nodes.map(base64) };
  }
}

function bitsSet(n: number): number {
  let count = 0;
  for (let rest = n; rest > 0; rest = Math.floor(rest / 2)) count += rest % 2;
  return count;
}
