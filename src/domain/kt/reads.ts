import { createHash } from "node:crypto";
import { AppError, invalidRequest } from "../../errors.js";
import { base64, concat, utf8 } from "../../kt/bytes.js";
import { LEAF_DIRECTORY } from "../../kt/leaves.js";
import { nodeSha256 } from "../../kt/node-engine.js";
import {
  consistencyProofFromTiles,
  inclusionProofFromTiles,
  type TileReader,
  tileShape,
} from "../../kt/tiles.js";
import type { KtEntry } from "../../kt/wire.js";
import type { KtAuditorRecord, KtCheckpointRecord, KtLogStore } from "../../store/kt-types.js";
import type { AuditEvent } from "../../store/types.js";
import { noteWithCosignatures } from "./service.js";

/**
 * The key log's reads for anyone (docs/key-transparency.md, `GET /kt/v1/...`): the newest checkpoint with
 * every cosignature, consistency and inclusion proofs, tiles and directory snapshots; and the leaf data for
 * issuers and registered auditors. Everything is answered for the tree of the newest checkpoint: a
 * size or index beyond it is refused (`invalid_request`), so nothing unsigned is served.
 */

/** The most leaves one entries call returns. */
export const MAX_ENTRIES = 1_000;

/** A tile as `GET /kt/v1/tile/...` asks for it. */
export interface TileAddress {
  level: number;
  index: number;
  /** 256 for a full tile. */
  width: number;
}

/** Who reads leaf data: an issuer API key's tenant or a registered auditor. */
export type EntriesReader =
  | { kind: "issuer"; tenantId: string }
  | { kind: "auditor"; auditor: KtAuditorRecord };

export class KtReads {
  constructor(
    private readonly log: KtLogStore,
    private readonly tiles: TileReader,
  ) {}

  /** The newest checkpoint's note with every cosignature; `service_unavailable` before the first. */
  async checkpointNote(): Promise<string> {
    return noteWithCosignatures(await this.latest());
  }

  /** The consistency proof from size `from` to `to` (1 <= from <= to <= the newest checkpoint's size). */
  async consistency(from: number, to: number): Promise<{ from: number; to: number; proof: string[] }> {
    const latest = await this.latest();
    const problems = [];
    if (from < 1) problems.push({ field: "from", description: "must be at least 1" });
    if (from > to) problems.push({ field: "from", description: "must not be above to" });
    if (to > latest.size)
      problems.push({
        field: "to",
        description: `must not be above ${latest.size}, the newest checkpoint's size`,
      });
    if (problems.length > 0) throw invalidRequest(problems);
    const proof = await consistencyProofFromTiles(this.tiles, from, to, nodeSha256);
    return { from, to, proof: proof.map(base64) };
  }

  /** The inclusion proof of leaf `index` in the tree of `size` leaves (size at most the newest checkpoint's). */
  async inclusion(
    index: number,
    size: number,
  ): Promise<{ index: number; size: number; inclusion: string[] }> {
    const latest = await this.latest();
    const problems = [];
    if (index >= size) problems.push({ field: "index", description: "must be below size" });
    if (size > latest.size)
      problems.push({
        field: "size",
        description: `must not be above ${latest.size}, the newest checkpoint's size`,
      });
    if (problems.length > 0) throw invalidRequest(problems);
    const proof = await inclusionProofFromTiles(this.tiles, index, size, nodeSha256);
    return { index, size, inclusion: proof.map(base64) };
  }

  /** A tile's bytes, when the newest checkpoint's tree has it at that width; `not_found` otherwise. */
  async tile(address: TileAddress): Promise<Uint8Array> {
    const latest = await this.latest();
    const { full, partialWidth } = tileShape(latest.size, address.level);
    // A full tile also serves its prefixes: a monitor holding an older checkpoint asks for those.
    const exists = address.index < full || (address.index === full && address.width <= partialWidth);
    if (!exists) throw new AppError("not_found", "The log has no such tile (yet).");
    const [bytes] = await this.tiles.readTiles([address]);
    return bytes as Uint8Array;
  }

  /** A directory snapshot's exact JSON by its SHA-256; `not_found` for one the log does not hold. */
  async directory(sha256: string): Promise<string> {
    const record = await this.log.directory(sha256);
    if (record === undefined) throw new AppError("not_found", "No directory snapshot has that SHA-256.");
    return record.json;
  }

  /**
   * Leaves `[start, end)` as `{index, leaf}` (base64 leaf bytes; a snapshot's leaf rebuilt from its
   * body), for an issuer or an auditor, with the audit event the caller records.
   */
  async entries(start: number, end: number): Promise<KtEntry[]> {
    const latest = await this.latest();
    const problems = [];
    if (start >= end) problems.push({ field: "start", description: "must be below end" });
    if (end > latest.size)
      problems.push({
        field: "end",
        description: `must not be above ${latest.size}, the newest checkpoint's size`,
      });
    if (end - start > MAX_ENTRIES)
      problems.push({ field: "end", description: `must be at most ${MAX_ENTRIES} above start` });
    if (problems.length > 0) throw invalidRequest(problems);
    const records = await this.log.leaves(start, end);
    const out: KtEntry[] = [];
    for (const record of records) {
      let leaf = record.leaf;
      if (leaf === undefined && record.directorySha256 !== undefined) {
        const body = await this.log.directory(record.directorySha256);
        if (body !== undefined) leaf = concat(new Uint8Array([LEAF_DIRECTORY]), utf8(body.json));
      }
      if (leaf === undefined) throw new AppError("internal_server_error", "A leaf of the log has no bytes.");
      out.push({ index: record.index, leaf: base64(leaf) });
    }
    return out;
  }

  private async latest(): Promise<KtCheckpointRecord> {
    const latest = await this.log.latestCheckpoint();
    if (latest === undefined) {
      throw new AppError("service_unavailable", "The key log has no checkpoint yet.", {
        retryAfterSeconds: 1,
      });
    }
    return latest;
  }
}

/** The audit event of a read of leaf data. */
export function entriesAudit(
  reader: EntriesReader,
  range: { start: number; end: number },
  call: { at: Date; requestId: string; sourceIp: string },
): AuditEvent {
  return {
    ...call,
    action: "kt.entries.read",
    tenantId: reader.kind === "issuer" ? reader.tenantId : `auditor:${reader.auditor.id}`,
    subject: `${range.start}-${range.end}`,
  };
}

/** The SHA-256 (hex) of an auditor's token, as stored. */
export function auditorTokenHash(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}
