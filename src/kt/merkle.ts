import { bytesEqual, concat } from "./bytes.js";
import { defaultSha256, type Sha256 } from "./hash.js";

/**
 * The Merkle tree of RFC 9162 section 2.1 (the same hashing as RFC 6962): leaf hash
 * `SHA-256(0x00 || leaf)`, node hash `SHA-256(0x01 || left || right)`, the empty tree's root
 * `SHA-256("")`, inclusion and consistency proofs as sections 2.1.3 and 2.1.4 define them, and their
 * verification exactly as sections 2.1.3.2 and 2.1.4.2 write it.
 *
 * Tree sizes and indexes are JavaScript numbers, checked to be safe integers; nothing here uses the
 * 32-bit bit operators, so trees past 2^31 leaves work.
 */

/** Bytes of a hash (SHA-256). */
export const HASH_BYTES = 32;

/** The most hashes a proof of a tree of at most 2^53 leaves can have (inclusion: 53; consistency: 2 x 53). */
export const MAX_PROOF_HASHES = 106;

/** A half-open range [start, end) of leaf indexes whose Merkle Tree Hash (MTH) a proof carries. */
export interface LeafRange {
  start: number;
  end: number;
}

const LEAF_PREFIX = new Uint8Array([0]);
const NODE_PREFIX = new Uint8Array([1]);

/** RFC 9162 leaf hash of `leaf` (the leaf's bytes, before hashing). */
export function leafHash(leaf: Uint8Array, sha256: Sha256 = defaultSha256): Uint8Array {
  return sha256(concat(LEAF_PREFIX, leaf));
}

/** RFC 9162 interior node hash of two child hashes. */
export function nodeHash(left: Uint8Array, right: Uint8Array, sha256: Sha256 = defaultSha256): Uint8Array {
  return sha256(concat(NODE_PREFIX, left, right));
}

/** The root of the empty tree, SHA-256 of the empty string. */
export function emptyRoot(sha256: Sha256 = defaultSha256): Uint8Array {
  return sha256(new Uint8Array(0));
}

/** The largest power of two strictly below `n` (n >= 2), the split point `k` of RFC 9162. */
export function splitPoint(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** Whether `n` is a power of two (1, 2, 4, ...). */
export function isPowerOfTwo(n: number): boolean {
  if (n < 1) return false;
  let k = 1;
  while (k < n) k *= 2;
  return k === n;
}

/** Whether `n` is a tree size or index this code handles: a safe non-negative integer. */
export function isTreeNumber(n: unknown): n is number {
  return typeof n === "number" && Number.isSafeInteger(n) && n >= 0;
}

/**
 * The ranges whose hashes make the inclusion proof of leaf `index` in a tree of `size` leaves, in
 * proof order: RFC 9162's `PATH(m, D[n])`, with the sibling of the deepest level first.
 */
export function inclusionRanges(index: number, size: number): LeafRange[] {
  if (!isTreeNumber(index) || !isTreeNumber(size) || index >= size) {
    throw new RangeError(`no leaf ${index} in a tree of ${size}`);
  }
  const out: LeafRange[] = [];
  let [start, end, m] = [0, size, index];
  while (end - start > 1) {
    const k = splitPoint(end - start);
    if (m < k) {
      out.push({ start: start + k, end });
      end = start + k;
    } else {
      out.push({ start, end: start + k });
      start += k;
      m -= k;
    }
  }
  return out.reverse();
}

/**
 * The ranges whose hashes make the consistency proof from a tree of `oldSize` leaves to one of
 * `size`: RFC 9162's `PROOF(m, D[n])` (`SUBPROOF(m, D[n], true)`), empty when `oldSize` is 0 or equals
 * `size`.
 */
export function consistencyRanges(oldSize: number, size: number): LeafRange[] {
  if (!isTreeNumber(oldSize) || !isTreeNumber(size) || oldSize > size) {
    throw new RangeError(`no consistency proof from ${oldSize} to ${size}`);
  }
  if (oldSize === 0 || oldSize === size) return [];
  const out: LeafRange[] = [];
  let [start, end, m, whole] = [0, size, oldSize, true];
  while (m !== end - start) {
    const k = splitPoint(end - start);
    if (m <= k) {
      out.push({ start: start + k, end });
      end = start + k;
    } else {
      out.push({ start, end: start + k });
      start += k;
      m -= k;
      whole = false;
    }
  }
  if (!whole) out.push({ start, end });
  return out.reverse();
}

/**
 * The complete subtrees a range splits into, left to right, as `[level, index]` pairs: the subtree
 * of leaves `[index * 2^level, (index + 1) * 2^level)`. A proof's ranges start at a multiple of their
 * left part, so each splits into at most one subtree per level.
 */
export function rangeNodes(range: LeafRange): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  let start = range.start;
  while (start < range.end) {
    let width = 1;
    while (start % (width * 2) === 0 && start + width * 2 <= range.end) width *= 2;
    out.push([Math.log2(width), start / width]);
    start += width;
  }
  return out;
}

/** The hash of a range from the hashes of its {@link rangeNodes}, folded right to left as MTH does. */
export function foldRange(nodeHashes: Uint8Array[], sha256: Sha256 = defaultSha256): Uint8Array {
  let acc = nodeHashes[nodeHashes.length - 1];
  if (acc === undefined) throw new RangeError("an empty range has no hash");
  for (let i = nodeHashes.length - 2; i >= 0; i--) acc = nodeHash(nodeHashes[i] as Uint8Array, acc, sha256);
  return acc;
}

/**
 * An in-memory Merkle tree over a list of leaf hashes, keeping every complete subtree's hash, so a
 * proof costs one lookup per hash (plus at most log n hashes for the right edge). Made for tests,
 * fixtures, monitors that hold the whole log, and as the reference the tiled store is checked against.
 */
export class MemoryTree {
  /** levels[h][i]: hash of the complete subtree of leaves [i * 2^h, (i + 1) * 2^h). */
  private readonly levels: Uint8Array[][] = [[]];

  constructor(
    leafHashes: Iterable<Uint8Array> = [],
    private readonly sha256: Sha256 = defaultSha256,
  ) {
    for (const hash of leafHashes) this.append(hash);
  }

  /** Number of leaves. */
  get size(): number {
    return (this.levels[0] as Uint8Array[]).length;
  }

  /** Appends a leaf hash, hashing every subtree it completes. */
  append(hash: Uint8Array): void {
    let level = 0;
    let node = hash;
    for (;;) {
      const row = this.levels[level] ?? [];
      this.levels[level] = row;
      row.push(node);
      if (row.length % 2 === 1) return;
      node = nodeHash(row[row.length - 2] as Uint8Array, node, this.sha256);
      level++;
    }
  }

  /** The leaf hash at `index`. */
  leaf(index: number): Uint8Array {
    return this.node(0, index);
  }

  /** The root of the tree's first `size` leaves (default: all). */
  root(size: number = this.size): Uint8Array {
    if (!isTreeNumber(size) || size > this.size) throw new RangeError(`no tree of ${size} leaves here`);
    return size === 0 ? emptyRoot(this.sha256) : this.rangeHash({ start: 0, end: size });
  }

  /** The inclusion proof of leaf `index` in the tree of the first `size` leaves. */
  inclusionProof(index: number, size: number = this.size): Uint8Array[] {
    if (size > this.size) throw new RangeError(`no tree of ${size} leaves here`);
    return inclusionRanges(index, size).map((range) => this.rangeHash(range));
  }

  /** The consistency proof from the first `oldSize` leaves to the first `size`. */
  consistencyProof(oldSize: number, size: number = this.size): Uint8Array[] {
    if (size > this.size) throw new RangeError(`no tree of ${size} leaves here`);
    return consistencyRanges(oldSize, size).map((range) => this.rangeHash(range));
  }

  /** The Merkle Tree Hash of a range of leaves. */
  rangeHash(range: LeafRange): Uint8Array {
    return foldRange(
      rangeNodes(range).map(([level, index]) => this.node(level, index)),
      this.sha256,
    );
  }

  private node(level: number, index: number): Uint8Array {
    const hash = this.levels[level]?.[index];
    if (hash === undefined) throw new RangeError(`no complete subtree (${level}, ${index})`);
    return hash;
  }
}

/** The root of a list of leaf hashes. */
export function rootOf(leafHashes: Uint8Array[], sha256: Sha256 = defaultSha256): Uint8Array {
  return new MemoryTree(leafHashes, sha256).root();
}

function halve(n: number): number {
  return Math.floor(n / 2);
}

function isOdd(n: number): boolean {
  return n % 2 === 1;
}

function wellFormed(proof: readonly Uint8Array[]): boolean {
  return (
    proof.length <= MAX_PROOF_HASHES && proof.every((h) => h instanceof Uint8Array && h.length === HASH_BYTES)
  );
}

/**
 * The root an inclusion proof leads to (RFC 9162 section 2.1.3.2, steps 1-5), or undefined when the
 * proof does not fit the index and size (too long, too short, a hash of the wrong length).
 */
export function rootFromInclusionProof(
  index: number,
  size: number,
  leaf: Uint8Array,
  proof: readonly Uint8Array[],
  sha256: Sha256 = defaultSha256,
): Uint8Array | undefined {
  if (!isTreeNumber(index) || !isTreeNumber(size) || index >= size) return undefined;
  if (!wellFormed(proof) || leaf.length !== HASH_BYTES) return undefined;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of proof) {
    if (sn === 0) return undefined;
    if (isOdd(fn) || fn === sn) {
      r = nodeHash(p, r, sha256);
      if (!isOdd(fn)) {
        while (!isOdd(fn) && fn !== 0) {
          fn = halve(fn);
          sn = halve(sn);
        }
      }
    } else {
      r = nodeHash(r, p, sha256);
    }
    fn = halve(fn);
    sn = halve(sn);
  }
  return sn === 0 ? r : undefined;
}

/** Whether `proof` proves that `leaf` (a leaf hash) is leaf `index` of the tree of `size` with `root`. */
export function verifyInclusion(
  index: number,
  size: number,
  leaf: Uint8Array,
  proof: readonly Uint8Array[],
  root: Uint8Array,
  sha256: Sha256 = defaultSha256,
): boolean {
  const computed = rootFromInclusionProof(index, size, leaf, proof, sha256);
  return computed !== undefined && bytesEqual(computed, root);
}

/**
 * Whether `proof` proves that the tree of `oldSize` with `oldRoot` is a prefix of the tree of `size`
 * with `root` (RFC 9162 section 2.1.4.2). Equal sizes need an empty proof and equal roots. From the
 * empty tree there is no proof (as in the reference code): a caller for whom the empty tree is a
 * valid starting point (a witness, C2SP tlog-witness) says so itself.
 */
export function verifyConsistency(
  oldSize: number,
  size: number,
  oldRoot: Uint8Array,
  root: Uint8Array,
  proof: readonly Uint8Array[],
  sha256: Sha256 = defaultSha256,
): boolean {
  if (!isTreeNumber(oldSize) || !isTreeNumber(size) || oldSize > size || !wellFormed(proof)) return false;
  if (oldSize === 0) return false;
  if (oldSize === size) return proof.length === 0 && bytesEqual(oldRoot, root);
  if (proof.length === 0) return false;
  const path = isPowerOfTwo(oldSize) ? [oldRoot, ...proof] : proof;
  let fn = oldSize - 1;
  let sn = size - 1;
  while (isOdd(fn)) {
    fn = halve(fn);
    sn = halve(sn);
  }
  let fr = path[0] as Uint8Array;
  let sr = fr;
  for (const c of path.slice(1)) {
    if (sn === 0) return false;
    if (isOdd(fn) || fn === sn) {
      fr = nodeHash(c, fr, sha256);
      sr = nodeHash(c, sr, sha256);
      if (!isOdd(fn)) {
        while (!isOdd(fn) && fn !== 0) {
          fn = halve(fn);
          sn = halve(sn);
        }
      }
    } else {
      sr = nodeHash(sr, c, sha256);
    }
    fn = halve(fn);
    sn = halve(sn);
  }
  return sn === 0 && bytesEqual(fr, oldRoot) && bytesEqual(sr, root);
}
