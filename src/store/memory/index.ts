import { buildRepositories, memoryParts } from "../repositories.js";
import type { Store } from "../types.js";

/** The stores made by {@link createMemoryStore}, for {@link isMemoryStore}. */
const memoryStores = new WeakSet<Store>();

/**
 * Creates the in-memory store, the embedded default for development and tests. Everything is lost when
 * the process exits, and nothing is shared between processes (rate limits included). Every method does
 * its check and its write with no `await` in between, which makes it atomic on Node's single thread.
 * Its repositories are the memory column of `REPOSITORIES` (src/store/repositories.ts), made from one
 * set of shared parts: a change that also writes an event, a key-log statement or a payment's receipt
 * writes it in the same synchronous step.
 */
export function createMemoryStore(): Store {
  const parts = memoryParts();
  const store: Store = {
    kind: "memory",
    ...buildRepositories(({ memory }) => memory(parts)),
    init: async () => {},
    ping: async () => {},
    close: async () => {},
  };
  memoryStores.add(store);
  return store;
}

/**
 * Whether `store` is a store made by {@link createMemoryStore} (not a copy or a wrapper of one). Its
 * calls do their work when they are made and return settled promises: none waits on I/O or a timer.
 */
export function isMemoryStore(store: Store): boolean {
  return memoryStores.has(store);
}
