import { createHash, createHmac, createSecretKey, randomBytes, randomUUID } from "node:crypto";
import type { FastifyReply, FastifyRequest } from "fastify";

/**
 * What the bare routes of the baseline share (floor.ts: REST encrypt; zk-floor.ts: the zero-knowledge
 * look-up and sealed receipt; kt-floor.ts: the key log's reads), written once so that each route file
 * holds only what its route does: the API key looked up by its SHA-256, the call counted in a
 * per-minute window with the rate-limit headers, a request id, the keyed card reference (HMAC of the
 * hashed PAN), and the envelope's refusals.
 */

export const HASHED_PAN = /^[0-9a-fA-F]{64}$/;

/**
 * A key object, as the service keeps its pepper: on Node 24 `createHmac` with a Buffer or string key
 * first tries it as a KeyObject and a CryptoKey, slow brand checks that took a quarter of the bare
 * look-up's busy main thread; with a KeyObject they pass at once.
 */
const PEPPER = createSecretKey(randomBytes(32));
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
    reply.headers(this.headersOf(subject, limit));
  }

  /** Counts one call of `subject` now; the three rate-limit headers for `limit` (gRPC sends them as metadata). */
  headersOf(subject: string, limit: number): Record<string, string> {
    const windowStart = Math.floor(Date.now() / WINDOW_MS) * WINDOW_MS;
    const counter = `${subject}:${windowStart}`;
    const n = (this.counters.get(counter) ?? 0) + 1;
    this.counters.set(counter, n);
    return {
      "x-ratelimit-limit": String(limit),
      "x-ratelimit-remaining": String(Math.max(0, limit - n)),
      "x-ratelimit-reset": String((windowStart + WINDOW_MS) / 1000),
    };
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
    const { headers, principal } = this.admitCall(request.headers["x-api-key"]);
    reply.headers(headers);
    if (principal === undefined) {
      void refuse(reply, 401, "unauthorized");
      return undefined;
    }
    return principal;
  }

  /**
   * The same for a call of another protocol (the bare gRPC routes): the response headers (a request
   * id, and the rate-limit headers once the call is counted) and the principal, if the key is known.
   */
  admitCall(apiKey: unknown): { headers: Record<string, string>; principal?: Principal } {
    const headers: Record<string, string> = { "x-request-id": randomUUID() };
    const principal =
      typeof apiKey === "string"
        ? this.keys.get(createHash("sha256").update(apiKey).digest("hex"))
        : undefined;
    if (principal === undefined) return { headers };
    Object.assign(headers, this.window.headersOf(`${principal.id}:all`, this.limit));
    return { headers, principal };
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
