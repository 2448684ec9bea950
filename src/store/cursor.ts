import { invalidRequest } from "../errors.js";

/**
 * The position after which a receipts page continues: the last receipt of the previous page. Pages are
 * ordered by `createdAt` descending, then `id` descending, so the pair identifies a gap-free resume
 * point even when several receipts share a timestamp.
 */
export interface ReceiptCursor {
  createdAt: Date;
  id: string;
}

/** The largest time a JavaScript Date can hold (±100,000,000 days), in ms; beyond it a Date is invalid. */
const MAX_DATE_MS = 8.64e15;

/** Encodes a cursor as an opaque base64url token (clients must not parse it). */
export function encodeCursor(cursor: ReceiptCursor): string {
  return Buffer.from(JSON.stringify([cursor.createdAt.getTime(), cursor.id]), "utf8").toString("base64url");
}

/**
 * Decodes a token made by {@link encodeCursor}. A token that was not made by it is a client error
 * (`invalid_request` on `pageToken`), not a bug: page tokens come from requests.
 */
export function decodeCursor(token: string): ReceiptCursor {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
  } catch {
    parsed = undefined;
  }
  if (
    Array.isArray(parsed) &&
    parsed.length === 2 &&
    Number.isSafeInteger(parsed[0]) &&
    Math.abs(parsed[0] as number) <= MAX_DATE_MS &&
    typeof parsed[1] === "string" &&
    parsed[1].length > 0
  ) {
    return { createdAt: new Date(parsed[0] as number), id: parsed[1] };
  }
  throw invalidRequest([{ field: "pageToken", description: "is not a page token returned by this service" }]);
}

/** A delivery-log page token: the position of the last event of the previous page. */
export function encodeDeliveryCursor(eventSeq: number): string {
  return Buffer.from(JSON.stringify({ s: eventSeq }), "utf8").toString("base64url");
}

/** The position in a page token made by {@link encodeDeliveryCursor}; `invalid_request` otherwise. */
export function decodeDeliveryCursor(token: string): number {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
  } catch {
    parsed = undefined;
  }
  const seq = (parsed as { s?: unknown } | undefined)?.s;
  if (typeof seq === "number" && Number.isSafeInteger(seq) && seq > 0) return seq;
  throw invalidRequest([{ field: "pageToken", description: "is not a page token returned by this service" }]);
}
