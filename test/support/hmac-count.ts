import type * as crypto from "node:crypto";

/**
 * How many HMACs the code under test took. A test file counts them by mocking `node:crypto` with
 * {@link cryptoCountingHmacs}, through a dynamic import (a mock's factory runs before the file's imports):
 *
 *   vi.mock("node:crypto", async (original) =>
 *     (await import("../support/hmac-count.js")).cryptoCountingHmacs(original),
 *   );
 */
export const hmacs = { count: 0 };

/** `node:crypto` with `createHmac` counted in {@link hmacs} (and computed by Node as before). */
export async function cryptoCountingHmacs(importOriginal: () => Promise<typeof crypto>) {
  const real = await importOriginal();
  const createHmac = ((...args: Parameters<typeof real.createHmac>) => {
    hmacs.count += 1;
    return real.createHmac(...args);
  }) as typeof real.createHmac;
  return { ...real, default: { ...real, createHmac }, createHmac };
}
