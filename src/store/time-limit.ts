import { AppError } from "../errors.js";
import type { Store } from "./types.js";

/** Default of `STORE_TIMEOUT_MS`: how long one store call may take before the request gets a 503. */
export const DEFAULT_STORE_TIMEOUT_MS = 5_000;

/**
 * Wraps a store so that every repository call and `ping` settles within `timeoutMs` milliseconds:
 * a call that takes longer is answered with `AppError("service_unavailable")` (503 / UNAVAILABLE)
 * instead of holding its request, and its connection, forever. The contract's rule "an unreachable
 * or timed-out backend throws service_unavailable" then holds for every implementation, including
 * the memory store and test doubles, not only for the MongoDB driver's own limits (which stay as
 * they are and usually answer first).
 *
 * A call that misses the deadline is not cancelled: a write may still land afterwards. Every write
 * that matters is atomic on its own (a payment with its receipt, a grant within the cap), so the
 * caller sees either all of it or none of it, and a retry is safe. `init` and `close` are lifecycle
 * calls, not request work, and are passed through unbounded.
 */
export function withTimeLimit(store: Store, timeoutMs: number = DEFAULT_STORE_TIMEOUT_MS): Store {
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1) {
    throw new RangeError("The store time limit must be a positive integer of milliseconds.");
  }
  // Every repository (any object-valued member, so one added later is bounded too).
  const limited = Object.fromEntries(
    Object.entries(store).map(([name, member]: [string, unknown]) => [
      name,
      typeof member === "object" && member !== null ? limitMethods(member, name, timeoutMs) : member,
    ]),
  ) as unknown as Store;
  return {
    ...limited,
    kind: store.kind,
    init: () => store.init(),
    ping: () => withinDeadline(store.ping(), "ping", timeoutMs),
    close: () => store.close(),
  };
}

/**
 * A view of `repository` whose methods each settle within `timeoutMs`. Each method's wrapper is made
 * once and reused: store calls are on every request's path.
 */
function limitMethods<T extends object>(repository: T, name: string, timeoutMs: number): T {
  const wrappers = new Map<PropertyKey, { of: unknown; wrapper: (...args: unknown[]) => Promise<unknown> }>();
  return new Proxy(repository, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== "function") return value;
      const cached = wrappers.get(property);
      if (cached?.of === value) return cached.wrapper;
      const what = `${name}.${String(property)}`;
      const wrapper = async (...args: unknown[]) =>
        withinDeadline(value.apply(target, args), what, timeoutMs);
      wrappers.set(property, { of: value, wrapper });
      return wrapper;
    },
  });
}

/** Settles like `call`, or rejects with `service_unavailable` once `timeoutMs` has passed. */
async function withinDeadline<T>(call: T | Promise<T>, what: string, timeoutMs: number): Promise<T> {
  const pending = Promise.resolve(call);
  pending.catch(() => undefined);
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(
        new AppError("service_unavailable", "The store is unavailable.", {
          cause: new Error(`store call ${what} did not settle within ${timeoutMs} ms`),
        }),
      );
    }, timeoutMs);
  });
  try {
    return await Promise.race([pending, expired]);
  } finally {
    clearTimeout(timer);
  }
}
