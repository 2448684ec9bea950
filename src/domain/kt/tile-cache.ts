import type { SubtreeMemo, Tile, TileReader, TileRequest } from "../../kt/tiles.js";

/**
 * A {@link TileReader} that keeps the tiles it read. A tile of a given width never changes (a full
 * tile is final; a partial one only grows, and its prefix of a given width is what every tree of that
 * size has), so the cache needs no invalidation: proofs under a checkpoint read mostly from memory.
 * Bounded by count, dropping the entries least recently used; a full tile is 8 KiB.
 */
export class CachedTiles implements TileReader {
  private readonly entries = new Map<string, Uint8Array>();

  constructor(
    private readonly source: TileReader,
    private readonly maxEntries = 2_048,
  ) {}

  async readTiles(requests: TileRequest[]): Promise<Uint8Array[]> {
    const keys = requests.map((r) => `${r.level}/${r.index}/${r.width}`);
    const missing: TileRequest[] = [];
    const found = keys.map((key, i) => {
      const hit = this.entries.get(key);
      if (hit === undefined) {
        missing.push(requests[i] as TileRequest);
        return undefined;
      }
      this.entries.delete(key);
      this.entries.set(key, hit);
      return hit;
    });
    if (missing.length === 0) return found as Uint8Array[];
    const read = await this.source.readTiles(missing);
    let next = 0;
    return found.map((hit, i) => {
      if (hit !== undefined) return hit;
      const tile = read[next++] as Uint8Array;
      this.remember(keys[i] as string, tile);
      return tile;
    });
  }

  private remember(key: string, tile: Uint8Array): void {
    this.entries.set(key, tile);
    if (this.entries.size > this.maxEntries) {
      const oldest = this.entries.keys().next().value as string;
      this.entries.delete(oldest);
    }
  }
}

/**
 * A {@link TileReader} that sees `tiles` (an append's, not written yet) over `below`: the sequencer
 * computes the new root before it writes.
 */
export class TileOverlay implements TileReader {
  private readonly own: Map<string, Uint8Array>;

  constructor(
    private readonly below: TileReader,
    tiles: readonly Tile[],
  ) {
    this.own = new Map(tiles.map((t) => [`${t.level}/${t.index}`, t.hashes]));
  }

  async readTiles(requests: TileRequest[]): Promise<Uint8Array[]> {
    const fromBelow = requests.filter((r) => !this.own.has(`${r.level}/${r.index}`));
    const read = fromBelow.length > 0 ? await this.below.readTiles(fromBelow) : [];
    let next = 0;
    return requests.map((r) => {
      const own = this.own.get(`${r.level}/${r.index}`);
      if (own === undefined) return read[next++] as Uint8Array;
      if (own.length < r.width * 32) throw new Error(`tile ${r.level}/${r.index} is short`);
      return own.subarray(0, r.width * 32);
    });
  }
}

/**
 * A {@link SubtreeMemo} bounded by count, dropping the entries least recently used (about 150 bytes
 * each). A complete subtree's hash is final once its leaves are in the log, so nothing invalidates
 * it: only what this process read from the store's tiles is kept, never an append not yet written.
 */
export class SubtreeLru implements SubtreeMemo {
  private readonly entries = new Map<number, Uint8Array>();

  constructor(private readonly maxEntries = 65_536) {}

  get(level: number, index: number): Uint8Array | undefined {
    const key = memoKey(level, index);
    const hit = this.entries.get(key);
    if (hit !== undefined) {
      this.entries.delete(key);
      this.entries.set(key, hit);
    }
    return hit;
  }

  set(level: number, index: number, hash: Uint8Array): void {
    this.entries.set(memoKey(level, index), hash);
    if (this.entries.size > this.maxEntries) {
      this.entries.delete(this.entries.keys().next().value as number);
    }
  }
}

/** One number for (level, index): level < 64, and index < 2^46 for any tree a log will hold. */
function memoKey(level: number, index: number): number {
  return index * 64 + level;
}

/**
 * A map bounded by count, dropping the entry least recently used. For answers' parts that never
 * change once made (a leaf's inclusion proof under one tree size, a statement rebuilt for one card
 * reference): a look-up asked again under the same checkpoint costs a map read.
 */
export class Lru<K, V> {
  private readonly entries = new Map<K, V>();

  constructor(private readonly maxEntries: number) {}

  get(key: K): V | undefined {
    const hit = this.entries.get(key);
    if (hit !== undefined) {
      this.entries.delete(key);
      this.entries.set(key, hit);
    }
    return hit;
  }

  set(key: K, value: V): void {
    this.entries.delete(key);
    this.entries.set(key, value);
    if (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value as K);
  }
}
