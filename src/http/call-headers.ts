import type { IncomingHttpHeaders } from "node:http";

/**
 * The `Headers` of a REST or fast-path gRPC call as the interceptors and handlers see them (`req.header`,
 * `ctx.responseHeader`, `ctx.responseTrailer`): a map of lower-case names to values, with the
 * `Headers` interface and none of its cost. Node's `Headers` (undici) validates and normalises every
 * name and value and sorts on each iteration; here the request's values come from Node's HTTP parser,
 * which already validated them, and the rest are set by our own code. Three of them per call showed
 * up in the profile of every REST call. A request's headers are read in place, from Node's header
 * object, until something changes them.
 *
 * Differences from `Headers` that no caller relies on: iteration is in insertion order rather than
 * sorted, and values are not trimmed.
 */
export class CallHeaders implements Headers {
  /** The headers once written to (or built from `source`); until then reads go to `source`. */
  private map: Map<string, string> | undefined;
  /** A Node request's headers, read in place until the first change, and the names left out. */
  private source: { headers: IncomingHttpHeaders; skip: (name: string) => boolean } | undefined;

  /**
   * The headers of a Node request, without those `skip` names (hop-by-hop and protocol headers).
   * Nothing is copied until something changes them: a call mostly only reads a header or two.
   */
  static fromNode(headers: IncomingHttpHeaders, skip: (name: string) => boolean): CallHeaders {
    const result = new CallHeaders();
    result.source = { headers, skip };
    return result;
  }

  /** The headers as a map of their own, copied from the request on first use. */
  private own(): Map<string, string> {
    if (this.map === undefined) {
      this.map = new Map();
      for (const [name, value] of this.sourceEntries()) this.map.set(name, value);
      this.source = undefined;
    }
    return this.map;
  }

  private *sourceEntries(): Generator<[string, string]> {
    if (this.source === undefined) return;
    const { headers, skip } = this.source;
    for (const name in headers) {
      const value = sourceValue(headers, name, skip);
      if (value !== undefined) yield [name, value];
    }
  }

  private entriesNow(): IterableIterator<[string, string]> {
    return this.map?.entries() ?? this.sourceEntries();
  }

  append(name: string, value: string): void {
    const key = name.toLowerCase();
    const map = this.own();
    const current = map.get(key);
    map.set(key, current === undefined ? value : `${current}, ${value}`);
  }

  delete(name: string): void {
    this.own().delete(name.toLowerCase());
  }

  get(name: string): string | null {
    const key = name.toLowerCase();
    if (this.source !== undefined) return sourceValue(this.source.headers, key, this.source.skip) ?? null;
    return this.map?.get(key) ?? null;
  }

  getSetCookie(): string[] {
    const value = this.get("set-cookie");
    return value === null ? [] : [value];
  }

  has(name: string): boolean {
    return this.get(name) !== null;
  }

  set(name: string, value: string): void {
    this.own().set(name.toLowerCase(), value);
  }

  forEach(callback: (value: string, key: string, parent: Headers) => void, thisArg?: unknown): void {
    for (const [key, value] of this.entriesNow()) callback.call(thisArg, value, key, this);
  }

  entries(): MapIterator<[string, string]> {
    return this.own().entries();
  }

  keys(): MapIterator<string> {
    return this.own().keys();
  }

  values(): MapIterator<string> {
    return this.own().values();
  }

  [Symbol.iterator](): MapIterator<[string, string]> {
    return this.own().entries();
  }
}

/** One request header as a call sees it: Node joins repeated headers with ", " except a few arrays. */
function sourceValue(
  headers: IncomingHttpHeaders,
  name: string,
  skip: (name: string) => boolean,
): string | undefined {
  if (!Object.hasOwn(headers, name) || skip(name)) return undefined;
  const value = headers[name];
  return Array.isArray(value) ? value.join(", ") : value;
}
