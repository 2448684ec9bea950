import { concat } from "./bytes.js";
import { defaultSha256, type Sha256 } from "./hash.js";
import {
  consistencyRanges,
  emptyRoot,
  foldRange,
  HASH_BYTES,
  inclusionRanges,
  isTreeNumber,
  type LeafRange,
  nodeHash,
  rangeNodes,
} from "./merkle.js";

/**
 * The log's Merkle tree as a store keeps it: C2SP tlog-tiles. Tile (level L, index N) holds, in
 * order, up to 256 hashes of the complete subtrees of height 8L that cover leaves
 * [N * 256^(L+1), (N + 1) * 256^(L+1)); level 0 holds the leaf hashes. A full tile is 256 hashes
 * (8,192 bytes) and never changes; the rightmost tile of a level is partial and only grows, so the
 * partial tile of an older tree size is a prefix of today's.
 *
 * What it costs: storage is the leaf hashes plus 1/255 of them for the upper levels (about 32.1 bytes a
 * leaf), in about n/256 documents. An inclusion or consistency proof at size n reads at most two
 * tiles per level (ceil(log256 n) levels: 3 at 10^6 leaves, 4 up to 4 x 10^9) and hashes at most
 * 2^r - 1 nodes to rebuild a subtree of height 8L + r inside a tile: a few hundred SHA-256 calls in the
 * worst case, against n for rehashing the leaves. Appending a batch reads the rightmost tile of each
 * level and writes the tiles it changed.
 */

/** Hashes in a full tile, and the levels of the tree one tile spans. */
export const TILE_WIDTH = 256;
export const TILE_HEIGHT = 8;

/** One tile as stored: its concatenated hashes (width x 32 bytes). */
export interface Tile {
  level: number;
  index: number;
  /** The concatenated hashes; its length / 32 is the tile's width. */
  hashes: Uint8Array;
}

/** Which tile, and how many of its hashes (the prefix a tree of a given size has). */
export interface TileRequest {
  level: number;
  index: number;
  width: number;
}

/**
 * What a store offers the proof builder: tiles by level and index, each cut to the requested width
 * (a longer stored tile gives its prefix). Asked for all the tiles a proof needs in one call, so a
 * store can fetch them in one query. A missing tile or a short one is an error the store throws.
 */
export interface TileReader {
  readTiles(requests: TileRequest[]): Promise<Uint8Array[]>;
}

function pow256(level: number): number {
  return 256 ** level;
}

/** The tiles of tree size `size` at `level`: number of full ones, and the width of the partial one (0: none). */
export function tileShape(size: number, level: number): { full: number; partialWidth: number } {
  const entries = Math.floor(size / pow256(level));
  return { full: Math.floor(entries / TILE_WIDTH), partialWidth: entries % TILE_WIDTH };
}

/** The tile path of C2SP tlog-tiles: `tile/<L>/<N>[.p/<W>]` with N in x-prefixed 3-digit groups. */
export function tilePath(level: number, index: number, width: number = TILE_WIDTH): string {
  let rest = index;
  const groups: string[] = [];
  do {
    groups.unshift(String(rest % 1000).padStart(3, "0"));
    rest = Math.floor(rest / 1000);
  } while (rest > 0);
  const n = groups.map((g, i) => (i < groups.length - 1 ? `x${g}` : g)).join("/");
  return `tile/${level}/${n}${width === TILE_WIDTH ? "" : `.p/${width}`}`;
}

/** Where a complete subtree's hash is found: the tile, the first entry, how many entries, the height inside. */
interface NodeLocation {
  tile: TileRequest;
  offset: number;
  count: number;
  height: number;
}

function locate(level: number, index: number, size: number): NodeLocation {
  const tileLevel = Math.floor(level / TILE_HEIGHT);
  const height = level - tileLevel * TILE_HEIGHT;
  const count = 2 ** height;
  const row = index * count;
  const tileIndex = Math.floor(row / TILE_WIDTH);
  const entries = Math.floor(size / pow256(tileLevel));
  const width = Math.min(TILE_WIDTH, entries - tileIndex * TILE_WIDTH);
  return { tile: { level: tileLevel, index: tileIndex, width }, offset: row % TILE_WIDTH, count, height };
}

function tileKey(t: { level: number; index: number }): string {
  return `${t.level}/${t.index}`;
}

/** The Merkle Tree Hash of `count` consecutive hashes (count a power of two), as a complete subtree. */
function subtreeOf(hashes: Uint8Array, offset: number, count: number, sha256: Sha256): Uint8Array {
  let row: Uint8Array[] = [];
  for (let i = 0; i < count; i++) {
    const at = (offset + i) * HASH_BYTES;
    row.push(hashes.subarray(at, at + HASH_BYTES));
  }
  while (row.length > 1) {
    const next: Uint8Array[] = [];
    for (let i = 0; i < row.length; i += 2)
      next.push(nodeHash(row[i] as Uint8Array, row[i + 1] as Uint8Array, sha256));
    row = next;
  }
  return row[0] as Uint8Array;
}

/**
 * Hashes of complete subtrees kept between proofs. A complete subtree's hash never changes once the
 * log holds its leaves (tiles only grow), so a memo needs no invalidation as the tree grows; a proof
 * then rebuilds inside a tile only the small subtrees below {@link MEMO_MIN_HEIGHT}.
 */
export interface SubtreeMemo {
  get(level: number, index: number): Uint8Array | undefined;
  set(level: number, index: number, hash: Uint8Array): void;
}

/** Subtrees this tall inside their tile (16 hashes or more to rebuild) are worth keeping in a memo. */
export const MEMO_MIN_HEIGHT = 4;

/**
 * The hashes of `ranges` of the tree of `size` leaves, read from tiles: every tile needed is asked for
 * in one {@link TileReader.readTiles} call. With a `memo`, a subtree found there needs no tile, and
 * each tall subtree rebuilt is kept in it.
 */
export async function rangeHashesFromTiles(
  reader: TileReader,
  size: number,
  ranges: LeafRange[],
  sha256: Sha256 = defaultSha256,
  memo?: SubtreeMemo,
): Promise<Uint8Array[]> {
  const perRange = ranges.map((range) =>
    rangeNodes(range).map(([l, i]) => {
      const loc = locate(l, i, size);
      const known = memo !== undefined && loc.height >= MEMO_MIN_HEIGHT ? memo.get(l, i) : undefined;
      return { level: l, index: i, loc, known };
    }),
  );
  const wanted = new Map<string, TileRequest>();
  for (const { loc, known } of perRange.flat()) {
    if (known !== undefined) continue;
    const have = wanted.get(tileKey(loc.tile));
    if (have === undefined || have.width < loc.tile.width) wanted.set(tileKey(loc.tile), loc.tile);
  }
  const requests = [...wanted.values()];
  const contents = requests.length > 0 ? await reader.readTiles(requests) : [];
  const byKey = new Map<string, Uint8Array>();
  requests.forEach((request, i) => {
    const hashes = contents[i];
    if (hashes === undefined || hashes.length !== request.width * HASH_BYTES) {
      throw new Error(`tile ${tilePath(request.level, request.index, request.width)} is missing or short`);
    }
    byKey.set(tileKey(request), hashes);
  });
  return perRange.map((nodes) =>
    foldRange(
      nodes.map(({ level, index, loc, known }) => {
        if (known !== undefined) return known;
        const hash = subtreeOf(byKey.get(tileKey(loc.tile)) as Uint8Array, loc.offset, loc.count, sha256);
        if (memo !== undefined && loc.height >= MEMO_MIN_HEIGHT) memo.set(level, index, hash);
        return hash;
      }),
      sha256,
    ),
  );
}

/** The root of the tree of `size` leaves, from tiles. */
export async function rootFromTiles(
  reader: TileReader,
  size: number,
  sha256: Sha256 = defaultSha256,
): Promise<Uint8Array> {
  if (!isTreeNumber(size)) throw new RangeError(`bad tree size ${size}`);
  if (size === 0) return emptyRoot(sha256);
  const [root] = await rangeHashesFromTiles(reader, size, [{ start: 0, end: size }], sha256);
  return root as Uint8Array;
}

/** The inclusion proof of leaf `index` in the tree of `size` leaves, from tiles (and `memo`). */
export function inclusionProofFromTiles(
  reader: TileReader,
  index: number,
  size: number,
  sha256: Sha256 = defaultSha256,
  memo?: SubtreeMemo,
): Promise<Uint8Array[]> {
  return rangeHashesFromTiles(reader, size, inclusionRanges(index, size), sha256, memo);
}

/** The consistency proof from the tree of `oldSize` leaves to the tree of `size`, from tiles. */
export function consistencyProofFromTiles(
  reader: TileReader,
  oldSize: number,
  size: number,
  sha256: Sha256 = defaultSha256,
  memo?: SubtreeMemo,
): Promise<Uint8Array[]> {
  return rangeHashesFromTiles(reader, size, consistencyRanges(oldSize, size), sha256, memo);
}

/**
 * The tiles to write when `leafHashes` are appended to a tree of `oldSize` leaves: every tile that
 * changed (full tiles that filled, and the new partial tile of each level), each with its whole
 * content. Reads the rightmost partial tile of each level once. A store writes them so that a tile
 * only ever grows (the new content extends the old); the sequencer that calls this is the only writer.
 */
export async function appendToTiles(
  reader: TileReader,
  oldSize: number,
  leafHashes: Uint8Array[],
  sha256: Sha256 = defaultSha256,
): Promise<{ size: number; tiles: Tile[] }> {
  if (!isTreeNumber(oldSize)) throw new RangeError(`bad tree size ${oldSize}`);
  const edge: TileRequest[] = [];
  for (let level = 0; pow256(level) <= oldSize; level++) {
    const { full, partialWidth } = tileShape(oldSize, level);
    if (partialWidth > 0) edge.push({ level, index: full, width: partialWidth });
  }
  const edgeContents = edge.length > 0 ? await reader.readTiles(edge) : [];
  const open = new Map<number, { index: number; hashes: Uint8Array[] }>();
  edge.forEach((request, i) => {
    const content = edgeContents[i] ?? new Uint8Array(0);
    const hashes: Uint8Array[] = [];
    for (let at = 0; at < request.width * HASH_BYTES; at += HASH_BYTES)
      hashes.push(content.slice(at, at + HASH_BYTES));
    if (hashes.length !== request.width || hashes.some((h) => h.length !== HASH_BYTES)) {
      throw new Error(`tile ${tilePath(request.level, request.index, request.width)} is missing or short`);
    }
    open.set(request.level, { index: request.index, hashes });
  });
  const changed = new Map<string, { level: number; index: number; hashes: Uint8Array[] }>();
  const push = (level: number, hash: Uint8Array, leafIndex: number): void => {
    const index = Math.floor(leafIndex / pow256(level + 1));
    const tile = open.get(level) ?? { index, hashes: [] };
    open.set(level, tile);
    tile.hashes.push(hash);
    changed.set(`${level}/${tile.index}`, { level, index: tile.index, hashes: tile.hashes });
    if (tile.hashes.length === TILE_WIDTH) {
      open.delete(level);
      push(level + 1, subtreeOf(concat(...tile.hashes), 0, TILE_WIDTH, sha256), leafIndex);
    }
  };
  for (const [i, hash] of leafHashes.entries()) push(0, hash, oldSize + i);
  const tiles = [...changed.values()].map((t) => ({
    level: t.level,
    index: t.index,
    hashes: concat(...t.hashes),
  }));
  return { size: oldSize + leafHashes.length, tiles };
}

/** A {@link TileReader} over tiles held in memory (tests, benchmarks, a monitor's own copy). */
export class MemoryTiles implements TileReader {
  private readonly tiles = new Map<string, Uint8Array>();

  async readTiles(requests: TileRequest[]): Promise<Uint8Array[]> {
    return requests.map((r) => {
      const tile = this.tiles.get(tileKey(r));
      if (tile === undefined || tile.length < r.width * HASH_BYTES) {
        throw new Error(`tile ${tilePath(r.level, r.index, r.width)} is missing or short`);
      }
      return tile.subarray(0, r.width * HASH_BYTES);
    });
  }

  /** Stores tiles from {@link appendToTiles}, refusing any that would not extend what is stored. */
  write(tiles: Tile[]): void {
    for (const tile of tiles) {
      const key = tileKey(tile);
      const old = this.tiles.get(key);
      if (old !== undefined && (old.length > tile.hashes.length || !prefixOf(old, tile.hashes))) {
        throw new Error(`tile ${key} would be rewritten, not extended`);
      }
      this.tiles.set(key, tile.hashes);
    }
  }
}

function prefixOf(prefix: Uint8Array, bytes: Uint8Array): boolean {
  for (let i = 0; i < prefix.length; i++) if (prefix[i] !== bytes[i]) return false;
  return true;
}
