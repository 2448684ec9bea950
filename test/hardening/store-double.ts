import { AppError } from "../../src/errors.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/types.js";

/** One call the service made to its store, e.g. `payments.createWithReceipt`, with a copy of its arguments. */
export interface StoreCall {
  method: string;
  args: unknown[];
}

/**
 * What an injected fault does to a call: `fail` throws `service_unavailable` as an unreachable
 * backend does; `stall` holds the call until {@link StoreDouble.release} (then it runs for real).
 */
export type Fault = "fail" | "stall";

/** A real memory store behind a recording, fault-injecting front. */
export interface StoreDouble {
  /** The store to give the service. */
  readonly store: Store;
  /** Every call so far, in order, with its arguments deep-copied when it was made. */
  readonly calls: StoreCall[];
  /**
   * Applies `fault` to `times` calls of `method` (`repo.method`, or `ping`), after letting the next
   * `skip` calls of it through: `inject("users.findKey", "fail", 1, 1)` fails the second call.
   */
  inject(method: string, fault: Fault, times?: number, skip?: number): void;
  /** Resolves once a call of `method` is being held by a `stall` fault. */
  stalled(method: string): Promise<void>;
  /** Lets every held call proceed to the real store. */
  release(): void;
  /** Drops every fault not yet used and releases held calls: the store is back. */
  heal(): void;
}

/** Wraps `inner` (a fresh memory store by default) in a {@link StoreDouble}. */
export function storeDouble(inner: Store = createMemoryStore()): StoreDouble {
  const calls: StoreCall[] = [];
  const faults: Array<{ method: string; fault: Fault; left: number; skip: number }> = [];
  let held: Array<() => void> = [];
  const waiters = new Map<string, Array<() => void>>();

  async function around<T>(method: string, args: unknown[], run: () => Promise<T>): Promise<T> {
    calls.push({ method, args: structuredClone(withoutFunctions(args)) as unknown[] });
    const rule = faults.find((f) => f.method === method && f.left > 0);
    if (rule !== undefined && rule.skip > 0) rule.skip -= 1;
    else if (rule !== undefined) {
      rule.left -= 1;
      if (rule.fault === "fail") {
        throw new AppError("service_unavailable", "The store is unavailable.", {
          cause: new Error(`injected failure of ${method}`),
        });
      }
      await new Promise<void>((resolve) => {
        held.push(resolve);
        for (const wake of waiters.get(method) ?? []) wake();
        waiters.delete(method);
      });
    }
    return run();
  }

  const wrap = <T extends object>(repository: T, name: string): T =>
    new Proxy(repository, {
      get(target, property, receiver) {
        const value: unknown = Reflect.get(target, property, receiver);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) =>
          around(`${name}.${String(property)}`, args, async () => value.apply(target, args));
      },
    });

  // Every repository: any object-valued member of the store.
  const repositories = Object.fromEntries(
    Object.entries(inner).map(([name, member]: [string, unknown]) => [
      name,
      typeof member === "object" && member !== null ? wrap(member, name) : member,
    ]),
  ) as unknown as Store;
  const store: Store = {
    ...repositories,
    kind: inner.kind,
    init: () => inner.init(),
    ping: () => around("ping", [], () => inner.ping()),
    close: () => inner.close(),
  };

  const release = () => {
    const wake = held;
    held = [];
    for (const resolve of wake) resolve();
  };
  return {
    store,
    calls,
    inject(method, fault, times = 1, skip = 0) {
      faults.push({ method, fault, left: times, skip });
    },
    stalled(method) {
      return new Promise<void>((resolve) => {
        waiters.set(method, [...(waiters.get(method) ?? []), resolve]);
      });
    },
    release,
    heal() {
      faults.length = 0;
      release();
    },
  };
}

/**
 * `value` with every function replaced by `"[function]"`, so that it can be cloned: a registration
 * hands the store the function that builds its outcome's events (the outbox).
 */
function withoutFunctions(value: unknown): unknown {
  if (typeof value === "function") return "[function]";
  if (Array.isArray(value)) return value.map(withoutFunctions);
  if (value === null || typeof value !== "object" || value instanceof Date) return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withoutFunctions(v)]));
}
