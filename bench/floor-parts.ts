import { createHash, createHmac, randomBytes, randomUUID } from "node:crypto";
import type { FastifyReply, FastifyRequest } from "fastify";

/**
 * What the bare routes of the baseline share (floor.ts: REST encrypt; zk-floor.ts: the zero-knowledge
 * look-up and sealed receipt; kt-floor.ts: the key log's reads), written once so that each route file
 * holds only what its route does: the API key looked up by its SHA-256, the call counted in a
 * per-minute window with the rate-limit headers, a request id, the keyed card reference (HMAC of the
 * hashed PAN), and the envelope's refusals.
 */

export const HASHED_PAN = /^[0-9a-fA-F]{64}$/;

const PEPPER = randomBytes(32);
const WINDOW_MS = 60_000;

/** The keyed reference a card is stored by: the HMAC of its hashed PAN (lower case) under a pepper. */
export function panHash(hashedPan: string): string {
  return createHmac("sha256", PEPPER).update(hashedPan.toLowerCase()).digest("hex");
}

/** Calls counted per subject in per-minute windows, as the service's limiter counts them. */
export class RateWindow {
  private readonly counters = new Map<string, number>();

  /** Counts one call of `subject` now and sets the three rate-limit headers for `limit`. */
  count(reply: FastifyReply, subject: string, limit: number): void {
    const windowStart = Math.floor(Date.now() / WINDOW_MS) * WINDOW_MS;
    const counter = `${subject}:${windowStart}`;
    const n = (this.counters.get(counter) ?? 0) + 1;
    this.counters.set(counter, n);
    reply.header("x-ratelimit-limit", String(limit));
    reply.header("x-ratelimit-remaining", String(Math.max(0, limit - n)));
    reply.header("x-ratelimit-reset", String((windowStart + WINDOW_MS) / 1000));
  }
}

export interface Principal {
  id: string;
  tenantId: string;
}

/** The API keys one bare route accepts (by their SHA-256) and the counts of their calls. */
export class ApiKeyGate {
  private readonly keys = new Map<string, Principal>();
  private readonly window = new RateWindow();

  constructor(private readonly limit: number) {}

  add(apiKey: string, principal: Principal): void {
    this.keys.set(createHash("sha256").update(apiKey).digest("hex"), principal);
  }

  /**
   * A request id, then the caller's principal with its call counted (`<id>:all`); undefined once the
   * answer is sent: 401 without a known API key.
   */
  admit(request: FastifyRequest, reply: FastifyReply): Principal | undefined {
    reply.header("x-request-id", randomUUID());
    const key = request.headers["x-api-key"];
    const principal =
      typeof key === "string" ? this.keys.get(createHash("sha256").update(key).digest("hex")) : undefined;
    if (principal === undefined) {
      void refuse(reply, 401, "unauthorized");
      return undefined;
    }
    this.window.count(reply, `${principal.id}:all`, this.limit);
    return principal;
  }
}

/** An answer in the envelope with `status` and error `code`. */
export function refuse(reply: FastifyReply, status: number, code: string) {
  return reply.code(status).send({ success: false, error: { code } });
}

/** A 400 `invalid_request` naming every problem. */
export function invalid(reply: FastifyReply, problems: string[]) {
  return reply
    .code(400)
    .send({ success: false, error: { code: "invalid_request", details: problems.join("; ") } });
}
