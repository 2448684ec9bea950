import { randomUUID } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { RateWindow, refuse } from "./floor-parts.js";

/**
 * Bare routes of the key log's public reads, for `npm run bench:wrk`: `GET /kt/checkpoint` and
 * `GET /kt/directory/:sha256` on the baseline's Fastify app, answering the bytes the service answers
 * (the bench copies the service's newest checkpoint note and a directory snapshot into them), with what
 * the real reads must do besides: a request id, the read counted per client address in a per-minute
 * window with the rate-limit headers, the path's SHA-256 checked (64 lower-case hex) and looked up in
 * a map, the same content type and cache-control. No chain, no store interface, no metrics.
 */

const LIMIT = 1_000_000;
const SHA256 = /^[0-9a-f]{64}$/;

let note = "";
const directories = new Map<string, string>();
const reads = new RateWindow();

/** The checkpoint note and directory snapshots (by SHA-256) the routes answer. */
export function setUpKtFloor(checkpointNote: string, snapshots: Record<string, string>): void {
  note = checkpointNote;
  for (const [sha, json] of Object.entries(snapshots)) directories.set(sha, json);
}

function count(request: FastifyRequest, reply: FastifyReply): void {
  reply.header("x-request-id", randomUUID());
  reads.count(reply, `${request.ip}:kt`, LIMIT);
}

/** Mounts the two reads. */
export function registerKtFloor(app: FastifyInstance): void {
  app.get("/kt/checkpoint", async (request, reply) => {
    count(request, reply);
    return reply.type("text/plain; charset=utf-8").header("cache-control", "no-store").send(note);
  });
  app.get("/kt/directory/:sha256", async (request, reply) => {
    count(request, reply);
    const { sha256 } = request.params as { sha256: string };
    if (!SHA256.test(sha256)) return refuse(reply, 400, "invalid_request");
    const json = directories.get(sha256);
    if (json === undefined) return refuse(reply, 404, "not_found");
    return reply
      .type("application/json; charset=utf-8")
      .header("cache-control", "public, max-age=31536000, immutable")
      .send(json);
  });
}
