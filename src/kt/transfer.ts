import { base64url, concat, fromUtf8, utf8 } from "./bytes.js";
import { defaultSha256, type Sha256 } from "./hash.js";
import { type Checked, canonicalJson, type Json, parseCanonicalObject } from "./json.js";
import { directoryLeaf } from "./leaves.js";
import { checkMembers, SHA256_B64URL, TENANT, TIME_RULE, VERSION } from "./statements.js";

/**
 * The operator's transfer of a card to another issuer, as the key log records it
 * (docs/key-transparency.md, "The card transfer in the log"): a `0x03` leaf (a directory entry, in
 * RFC 8785 JSON) appended by the log, covered by its witnessed checkpoint like a snapshot, never signed
 * by an issuer. It names the issuers from and to in the clear (they are in every snapshot) and the
 * card only by a commitment to its keyed reference (`card`), which says nothing about the card
 * without the opening the service keeps beside the leaf. One entry per card reference (a card held by
 * hashed PAN and PAR has two, with one `transfer` id), each a step of that reference's statements
 * (`version`: the last + 1, retiring the active key: `card-rules.ts`).
 */

export const CARD_TRANSFER_TYPE = "receipts.v1/card-transfer";

/** A transfer entry's members. */
export interface CardTransferEntry {
  v: 1;
  type: typeof CARD_TRANSFER_TYPE;
  /** `trf_` and 16-64 letters or digits: one id for the entries of one transfer. */
  transfer: string;
  from: string;
  to: string;
  /** Unpadded base64url SHA-256("receipts.v1 kt transfer" || opening || keyed card reference). */
  card: string;
  version: number;
  transferredAt: string;
}

const RULES = {
  v: (v: Json) => (v === 1 ? undefined : "must be 1"),
  type: (v: Json) => (v === CARD_TRANSFER_TYPE ? undefined : `must be "${CARD_TRANSFER_TYPE}"`),
  transfer: (v: Json) =>
    typeof v === "string" && /^trf_[A-Za-z0-9]{16,64}$/.test(v)
      ? undefined
      : "must be trf_ and 16-64 letters or digits",
  from: TENANT,
  to: TENANT,
  card: SHA256_B64URL,
  version: VERSION,
  transferredAt: TIME_RULE,
};

const LABEL = utf8("receipts.v1 kt transfer");

/** The `card` commitment of a transfer entry. */
export function transferCommitment(
  opening: Uint8Array,
  cardKey: string,
  sha256: Sha256 = defaultSha256,
): string {
  return base64url(sha256(concat(LABEL, opening, utf8(cardKey))));
}

/** The entry's canonical JSON and its `0x03` leaf. */
export function transferLeaf(entry: CardTransferEntry): { json: string; leaf: Uint8Array } {
  const json = canonicalJson(entry as unknown as Json);
  return { json, leaf: directoryLeaf(json) };
}

/**
 * The transfer entry in a `0x03` leaf's JSON; `undefined` when the JSON is another directory entry (a
 * snapshot); a refusal when it says it is a transfer and breaks a rule.
 */
export function parseTransferEntry(json: Uint8Array | string): Checked<CardTransferEntry> | undefined {
  const text = typeof json === "string" ? json : fromUtf8(json);
  if (text === undefined) return undefined;
  const parsed = parseCanonicalObject(text);
  if (!parsed.ok || parsed.value.type !== CARD_TRANSFER_TYPE) return undefined;
  const problem = checkMembers(parsed.value, RULES);
  if (problem !== undefined) return { ok: false, reason: problem };
  return { ok: true, value: parsed.value as unknown as CardTransferEntry };
}
