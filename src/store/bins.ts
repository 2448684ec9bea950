/**
 * BIN prefixes: an issuer tenant owns 6- or 8-digit prefixes of its card numbers, and a
 * merchant may send a card's `cardBin` (its first 6 or 8 digits). One owner per card: a 6-digit prefix
 * covers every 8-digit prefix under it, so the two may not belong to different tenants.
 */

/**
 * The stored prefixes that could own `bin` or conflict with it: itself, and its 6-digit prefix when it
 * has 8 digits, most specific first.
 */
export function binsOverlapping(bin: string): string[] {
  return bin.length === 8 ? [bin, bin.slice(0, 6)] : [bin];
}
