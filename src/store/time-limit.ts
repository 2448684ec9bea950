import { AppError } from "../errors.js";
import { LOCAL_STORE_METHODS } from "./event-types.js";
import type { Store } from "./types.js";

/** Default of `STORE_TIMEOUT_MS`: how long one store call may take before the request gets a 503. */
export const DEFAULT_STORE_TIMEOUT_MS = 5_000;

/**
 * Wraps a store so that every repository call and `ping` settles within `timeoutMs` milliseconds:
 * a call that takes longer is answered with `AppError("service_unavailable")` (503 / UNAVAILABLE)
 * instead of holding its request, and its connection, forever. The contract's rule "an unreachable
 * or timed-out backend throws service_unavailable" then holds for every implementation, test doubles
 * included, not only for the MongoDB driver's own limits (which stay as they are and usually answer
 * first). `buildApp` does not wrap the memory store itself, whose calls settle when they are made.
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
  const deadlines = new Deadlines(timeoutMs);
  // Every repository (any object-valued member, so one added later is bounded too).
  const limited = Object.fromEntries(
    Object.entries(store).map(([name, member]: [string, unknown]) => [
      name,
      typeof member === "object" && member !== null ? limitMethods(member, name, deadlines) : member,
    ]),
  ) as unknown as Store;
  return {
    ...limited,
    kind: store.kind,
    init: () => store.init(),
    ping: () => deadlines.bound(() => store.ping(), "ping"),
    close: () => store.close(),
  };
}

/**
 * A view of `repository` whose methods each settle within the time limit. Each method's wrapper is
 * made once and reused: store calls are on every request's path.
 */
function limitMethods<T extends object>(repository: T, name: string, deadlines: Deadlines): T {
  const wrappers = new Map<PropertyKey, { of: unknown; wrapper: (...args: unknown[]) => Promise<unknown> }>();
  return new Proxy(repository, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== "function") return value;
      if (LOCAL_STORE_METHODS.has(property)) return value.bind(target);
      const cached = wrappers.get(property);
      if (cached?.of === value) return cached.wrapper;
      const what = `${name}.${String(property)}`;
      const wrapper = (...args: unknown[]) => deadlines.bound(() => value.apply(target, args), what);
      wrappers.set(property, { of: value, wrapper });
      return wrapper;
    },
  });
}

interface PendingCall {
  /** `performance.now()` after which the call is answered with `service_unavailable`. */
  deadline: number;
  what: string;
  reject: (err: AppError) => void;
  settled: boolean;
}

/**
 * The calls in flight and one timer for all of them. Every call gets the same time limit, so
 * deadlines come in the order the calls started: an array used as a queue (settled calls are
 * dropped from its head as new ones arrive) holds them, and a single timer armed for its head
 * replaces a timer per call, which cost more than the memory store's own work. (A `Set` deleting
 * each settled call rebuilt its table every time the calls in flight drained, on every request.)
 * While a call stalls at the head, the settled calls behind it stay queued until its deadline: at
 * most one time limit's worth of calls, a few small objects each.
 */
class Deadlines {
  private queue: PendingCall[] = [];
  private head = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly timeoutMs: number) {}

  /** Settles like `call()` (a synchronous throw becomes a rejection), or rejects once the limit has passed. */
  bound<T>(call: () => T | Promise<T>, what: string): Promise<T> {
    let result: T | Promise<T>;
    try {
      result = call();
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise<T>((resolve, reject) => {
      const entry: PendingCall = {
        deadline: performance.now() + this.timeoutMs,
        what,
        reject,
        settled: false,
      };
      this.enqueue(entry);
      Promise.resolve(result).then(
        (value) => {
          entry.settled = true;
          resolve(value);
        },
        (err: unknown) => {
          entry.settled = true;
          reject(err);
        },
      );
    });
  }

  private enqueue(entry: PendingCall): void {
    this.dropSettledHead();
    if (this.head > 0 && this.head * 2 >= this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    this.queue.push(entry);
    this.timer ??= this.arm(this.timeoutMs);
  }

  private dropSettledHead(): void {
    const queue = this.queue;
    while (this.head < queue.length && (queue[this.head] as PendingCall).settled) this.head++;
    if (this.head === queue.length) {
      queue.length = 0;
      this.head = 0;
    }
  }

  private arm(ms: number): NodeJS.Timeout {
    // Unreferenced: a pending store call keeps its request (and so the process) busy anyway.
    return setTimeout(() => this.expire(), Math.max(1, Math.ceil(ms))).unref();
  }

  /** Rejects every call past its deadline (settling later is then ignored) and re-arms for the next one. */
  private expire(): void {
    const now = performance.now();
    this.timer = undefined;
    for (this.dropSettledHead(); this.head < this.queue.length; this.dropSettledHead()) {
      const entry = this.queue[this.head] as PendingCall;
      if (entry.deadline > now) {
        this.timer = this.arm(entry.deadline - now);
        return;
      }
      entry.settled = true;
      entry.reject(
        new AppError("service_unavailable", "The store is unavailable.", {
          cause: new Error(`store call ${entry.what} did not settle within ${this.timeoutMs} ms`),
        }),
      );
    }
  }
}
