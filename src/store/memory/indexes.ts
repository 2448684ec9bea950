/* Secondary indexes of the memory store. */

/**
 * The record ids under one key of an index: a single id as itself, several as a `Set`. Most keys (a
 * transaction) have one record, and a `Set` per key cost about 150 bytes of heap for every stored
 * receipt; some keys have many (every receipt escrowed for a card not yet registered), so several ids
 * are a `Set`, never an array to scan.
 */
export type Ids = string | Set<string>;

/** `ids` with `id` added (a new value only when a single id becomes two). */
export function withId(ids: Ids | undefined, id: string): Ids {
  if (ids === undefined) return id;
  if (typeof ids === "string") return ids === id ? ids : new Set([ids, id]);
  return ids.add(id);
}

/** `ids` without `id`, or undefined when none are left. */
export function withoutId(ids: Ids | undefined, id: string): Ids | undefined {
  if (ids === undefined || ids === id) return undefined;
  if (typeof ids === "string") return ids;
  ids.delete(id);
  return ids.size === 0 ? undefined : ids;
}

/** The ids as a new array. */
export function idList(ids: Ids | undefined): string[] {
  return ids === undefined ? [] : typeof ids === "string" ? [ids] : [...ids];
}

/** A secondary index of the memory store: one key to many record ids. */
export class MultiIndex {
  private readonly map = new Map<string, Ids>();

  add(key: string, id: string): void {
    this.map.set(key, withId(this.map.get(key), id));
  }

  delete(key: string, id: string): void {
    const ids = withoutId(this.map.get(key), id);
    if (ids === undefined) this.map.delete(key);
    else this.map.set(key, ids);
  }

  get(key: string): string[] {
    return idList(this.map.get(key));
  }
}

/**
 * A map keyed by a pair of strings, kept as a map of maps so that storing an entry builds no key
 * string: a joined key (`a\u0000b`) cost about 50 bytes of heap per entry for as long as it is stored.
 */
export class PairMap<V> {
  private readonly outer = new Map<string, Map<string, V>>();

  get(a: string, b: string): V | undefined {
    return this.outer.get(a)?.get(b);
  }

  has(a: string, b: string): boolean {
    return this.outer.get(a)?.has(b) ?? false;
  }

  set(a: string, b: string, value: V): void {
    const inner = this.outer.get(a);
    if (inner === undefined) this.outer.set(a, new Map([[b, value]]));
    else inner.set(b, value);
  }

  delete(a: string, b: string): void {
    const inner = this.outer.get(a);
    if (inner === undefined) return;
    inner.delete(b);
    if (inner.size === 0) this.outer.delete(a);
  }

  /** Sets the entry to `change(current)`, or deletes it when that is undefined. */
  update(a: string, b: string, change: (current: V | undefined) => V | undefined): void {
    const value = change(this.get(a, b));
    if (value === undefined) this.delete(a, b);
    else this.set(a, b, value);
  }
}
