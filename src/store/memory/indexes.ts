/* Secondary indexes of the memory store. */

/**
 * The records under one key of an index: a single record as itself, several as a `Set`. Most keys (a
 * transaction) have one record, and a `Set` per key cost about 150 bytes of heap for every stored
 * receipt; some keys have many (every receipt escrowed for a card not yet registered), so several
 * records are a `Set`, never an array to scan. The index holds the records themselves rather than
 * their ids: an index of ids needs a map from id to record beside it, one more entry to write for
 * every record stored.
 */
export type Members<T extends object> = T | Set<T>;

/** `members` with `record` added (a new value only when a single record becomes two). */
export function withMember<T extends object>(members: Members<T> | undefined, record: T): Members<T> {
  if (members === undefined) return record;
  if (!(members instanceof Set)) return members === record ? members : new Set([members, record]);
  return members.add(record);
}

/** `members` without `record`, or undefined when none are left. */
export function withoutMember<T extends object>(
  members: Members<T> | undefined,
  record: T,
): Members<T> | undefined {
  if (members === undefined || members === record) return undefined;
  if (!(members instanceof Set)) return members;
  members.delete(record);
  return members.size === 0 ? undefined : members;
}

/** The records as a new array. */
export function memberList<T extends object>(members: Members<T> | undefined): T[] {
  return members === undefined ? [] : members instanceof Set ? [...members] : [members];
}

/** A secondary index of the memory store: one key to many records. */
export class MultiIndex<T extends object> {
  private readonly map = new Map<string, Members<T>>();

  add(key: string, record: T): void {
    this.map.set(key, withMember(this.map.get(key), record));
  }

  delete(key: string, record: T): void {
    const members = withoutMember(this.map.get(key), record);
    if (members === undefined) this.map.delete(key);
    else this.map.set(key, members);
  }

  get(key: string): T[] {
    return memberList(this.map.get(key));
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
