/** What the tests of the memory store's hand-written copies compare a copy and its original by. */

/** Every object reachable from `value`. */
export function objectsOf(value: unknown, into = new Set<object>()): Set<object> {
  if (typeof value !== "object" || value === null) return into;
  into.add(value);
  for (const member of Object.values(value)) objectsOf(member, into);
  return into;
}

/** The value with its members in order and dates as their times, to compare order too. */
export function shapeOf(value: unknown): unknown {
  if (value instanceof Date) return { date: value.getTime() };
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) return value.map(shapeOf);
  return Object.entries(value).map(([k, v]) => [k, shapeOf(v)]);
}
