import type { EncryptedReceipt } from "../../gen/receipts/v1/receipt_pb.js";
import type { ListReceiptsResponse } from "../../gen/receipts/v1/receipts_pb.js";
import { isAadBound, isKeyAlgorithm } from "../crypto/suites.js";
import { dateJson } from "../proto-scalars.js";
import { type PageProofs, type SealedTexts, sealedTextsOf } from "../store/sealed-texts.js";
import type { ReceiptPage, ReceiptRecord } from "../store/types.js";
import { base64TextOf } from "./base64-bytes.js";
import { encryptedReceiptOf } from "./convert.js";
import { OWN_JSON_TEXT, stringText } from "./json-text.js";

/**
 * A page of receipts as the API's `ListReceiptsResponse`, its receipts made from the page's records
 * when first read (one accessor per page, an own enumerable property, so a spread, a structured clone,
 * protobuf-es and a deep-equality check all read them as the plain message's), and its REST JSON text
 * written straight from the records while nobody has read them: the base64 texts the store keeps go
 * into the answer with no `Buffer` made for each sealed part and no `EncryptedReceipt` objects. The
 * text is exactly the compiled writer's of the plain message (test/rpc/receipt-page.test.ts); a record
 * of another shape than the store's is left to that writer. Once the receipts have been read (or set),
 * the message is an ordinary one and is written as one.
 */
export function receiptPageResponse(page: ReceiptPage): ListReceiptsResponse {
  const records = page.receipts;
  const proofs = sealedTextsOf(page);
  let receipts: EncryptedReceipt[] | undefined;
  const message = { $typeName: "receipts.v1.ListReceiptsResponse" } as ListReceiptsResponse;
  Object.defineProperty(message, "receipts", {
    enumerable: true,
    configurable: true,
    get: () => {
      if (receipts === undefined) receipts = records.map(encryptedReceiptOf);
      return receipts;
    },
    set: (value: EncryptedReceipt[]) => {
      receipts = value;
    },
  });
  message.nextPageToken = page.nextCursor ?? "";
  Object.defineProperty(message, OWN_JSON_TEXT, {
    value: () => (receipts === undefined ? pageText(records, proofs, message.nextPageToken) : undefined),
  });
  return message;
}

/** The message's JSON text from its records, or undefined when one of them is not of the store's shape. */
function pageText(
  records: readonly ReceiptRecord[],
  proofs: PageProofs | undefined,
  nextPageToken: unknown,
): string | undefined {
  if (typeof nextPageToken !== "string") return undefined;
  let text = "";
  for (let i = 0; i < records.length; i++) {
    const record = records[i] as ReceiptRecord;
    if (!isPlainRecord(record)) return undefined;
    const proven = proofs?.[i];
    text = i === 0 ? receiptText(record, proven) : `${text},${receiptText(record, proven)}`;
  }
  return `{"receipts":[${text}],"nextPageToken":${stringText(nextPageToken)}}`;
}

/**
 * `EncryptedReceipt` JSON of a record, members in field-number order, as the compiled writer has them;
 * a sealed part's text is put in as it is when it is the text its store proved canonical, else after
 * {@link base64TextOf}'s decode.
 */
function receiptText(r: ReceiptRecord, proven: SealedTexts | undefined): string {
  const bundle = r.keyBundle;
  let text = `{"version":${stringText(r.version)},"receiptId":${stringText(r.receiptId)},"keyId":${stringText(
    bundle.keyId,
  )},"keyBundle":{"encryptedAesKey":"${partText(bundle.encryptedAesKey, proven?.encryptedAesKey)}","keyId":${stringText(
    bundle.keyId,
  )},"algorithm":${stringText(bundle.algorithm)}`;
  if (bundle.encapsulatedKey !== undefined) {
    text += `,"encapsulatedKey":"${partText(bundle.encapsulatedKey, proven?.encapsulatedKey)}"`;
  }
  text += `,"aadBound":${isAadBound(bundle.algorithm, bundle.aadBound)}},"ciphertext":"${partText(
    r.ciphertext,
    proven?.ciphertext,
  )}","iv":"${partText(r.iv, proven?.iv)}","authTag":"${partText(r.authTag, proven?.authTag)}","merchantId":${stringText(
    r.merchantId,
  )},"transactionId":${stringText(r.transactionId)},"createdAt":"${dateJson(r.createdAt)}","isEscrowed":${
    r.isEscrowed
  }`;
  if (r.escrowKeyId !== undefined) text += `,"escrowKeyId":${stringText(r.escrowKeyId)}`;
  if (r.expiresAt !== undefined) text += `,"expiresAt":"${dateJson(r.expiresAt)}"`;
  return `${text}}`;
}

/** A sealed part's text in the answer: `text` itself when it is the one proven, else checked by a decode. */
function partText(text: string, proven: string | undefined): string {
  return text === proven ? text : base64TextOf(text);
}

const MIN_MS = Date.parse("0001-01-01T00:00:00Z");
const MAX_MS = Date.parse("9999-12-31T23:59:59.999Z");

/**
 * Whether every field {@link receiptText} reads has the type the store's records give it, so that the
 * text is the plain message's: anything else (a missing string, a date out of protobuf's range, a
 * suite not in the registry) is left to the compiled writer, which has its own answer for each.
 */
function isPlainRecord(r: ReceiptRecord): boolean {
  const b = r.keyBundle as ReceiptRecord["keyBundle"] | undefined;
  return (
    typeof b === "object" &&
    b !== null &&
    typeof b.keyId === "string" &&
    isKeyAlgorithm(b.algorithm) &&
    typeof b.encryptedAesKey === "string" &&
    (b.encapsulatedKey === undefined || typeof b.encapsulatedKey === "string") &&
    typeof r.version === "string" &&
    typeof r.receiptId === "string" &&
    typeof r.ciphertext === "string" &&
    typeof r.iv === "string" &&
    typeof r.authTag === "string" &&
    typeof r.merchantId === "string" &&
    typeof r.transactionId === "string" &&
    typeof r.isEscrowed === "boolean" &&
    (r.escrowKeyId === undefined || typeof r.escrowKeyId === "string") &&
    isDateInRange(r.createdAt) &&
    (r.expiresAt === undefined || isDateInRange(r.expiresAt))
  );
}

function isDateInRange(date: unknown): boolean {
  if (!(date instanceof Date)) return false;
  const ms = date.getTime();
  return ms >= MIN_MS && ms <= MAX_MS;
}
