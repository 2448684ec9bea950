import { createPublicKey, verify } from "node:crypto";
import type { JsonObject } from "@bufbuild/protobuf";
import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import { AppError, Violations } from "../errors.js";
import {
  canonicalJsonOf,
  type Json,
  receiptJsonOf,
  signedFormOf,
  signingTextOf,
  UNSIGNED_FIELDS,
} from "../receipt-fields.js";
import type { DomainDeps } from "./deps.js";

export { receiptJsonOf, signedFormOf, UNSIGNED_FIELDS };

import { sealedPlaintextOf, type ValidReceipt } from "./receipt-rules.js";

/**
 * Merchant signatures (README, "Merchant signatures"): a merchant registers an Ed25519 public key for a
 * merchantId; from then on every receipt of that merchantId must come with an `X-Receipt-Signature` over its
 * content, and the verified signature is sealed inside the receipt so the cardholder's app can check
 * after decryption that the merchant wrote it, without trusting this service.
 *
 * What is signed, for a receipt given as JSON (the merchant's request body, or a decrypted receipt):
 * the UTF-8 bytes of the RFC 8785 canonical JSON of that object without {@link UNSIGNED_FIELDS} and
 * with every member whose value is `null`, `""` or `[]` removed, recursively ({@link receiptSigningInput}).
 * The service takes that JSON from the decoded request message ({@link receiptJsonOf}), so REST and
 * gRPC callers sign the same thing.
 */

/** The only signing algorithm. */
export const SIGNATURE_ALGORITHM = "Ed25519";

/** The request header (gRPC metadata) carrying the signature, lower-case as in `Headers`. */
export const SIGNATURE_HEADER = "x-receipt-signature";

/** Length of an Ed25519 signature (RFC 8032), in bytes. */
const SIGNATURE_BYTES = 64;

/**
 * Checks the signature of a receipt request when its merchantId has a registered key, and on success
 * sets `merchantSignature` and `merchantKeyId` on `receipt` so that they are sealed with it. Call it
 * after validation and after every field the service derives (the gateway's amount) is set: the
 * receipt must be sealed exactly as it was signed.
 *
 * Without a registered key the header is ignored and nothing is sealed: merchants can roll signing
 * out to their terminals before registering the key, and registering it turns enforcement on.
 * Throws `invalid_signature` when the header is missing, malformed or does not verify, or the key is
 * revoked, and
 * `invalid_request` (naming the fields) when the service would seal something other than what was
 * signed (a lower-case currency, a defaulted version, generated mock items, a derived amount), since
 * the cardholder could then not verify the signature.
 */
export async function applyMerchantSignature(
  deps: DomainDeps,
  request: Receipt,
  receipt: ValidReceipt,
  header: string | null,
): Promise<void> {
  const key = await deps.store.merchantKeys.findByMerchantId(receipt.merchantId);
  if (key === undefined) return;
  // Revoking the current key does not turn signing off: receipts wait for a new key.
  if (key.revokedAt !== undefined) {
    throw signatureError("cannot be checked: this merchantId's signing key is revoked; register a new one");
  }
  const signature = decodeSignature(header);
  const signed = signedFormOf(receiptJsonOf(request) as { [name: string]: Json });
  assertSealedAsSigned(signed, signedFormOf(sealedPlaintextOf(receipt) as { [name: string]: Json }));
  const data = Buffer.from(canonicalJsonOf(signed), "utf8");
  if (!verifies(data, key.publicKey, signature)) {
    throw signatureError("does not verify with the merchantId's signing key over this receipt");
  }
  receipt.merchantSignature = signature.toString("base64");
  receipt.merchantKeyId = key.merchantKeyId;
}

/**
 * The bytes a receipt signature covers: UTF-8 of the RFC 8785 canonical JSON of its signed form
 * (`receipt-fields.ts`). The same function serves the merchant (on its request body) and the
 * cardholder's app (on the decrypted receipt).
 */
export function receiptSigningInput(receipt: JsonObject): Buffer {
  return Buffer.from(signingTextOf(receipt as { [name: string]: Json }), "utf8");
}

/** The signature bytes of the header: standard or URL-safe base64 of exactly 64 bytes. */
function decodeSignature(header: string | null): Buffer {
  if (header === null || header === "") {
    throw signatureError(
      "is required: this merchantId has a registered signing key, so its receipts must be signed",
    );
  }
  const text = header.trim();
  const bytes = /^(?:[A-Za-z0-9+/]+|[A-Za-z0-9_-]+)={0,2}$/.test(text) ? Buffer.from(text, "base64") : null;
  if (bytes === null || bytes.length !== SIGNATURE_BYTES) {
    throw signatureError(`must be the base64 of a ${SIGNATURE_BYTES}-byte Ed25519 signature`);
  }
  return bytes;
}

/** Hints for the fields the service changes while validating, when a signed receipt differs there. */
const SEALED_FORM_HINTS: Readonly<Record<string, string>> = {
  version: "is required in a signed receipt (otherwise the service seals the default version)",
  currency: "must be upper-case in a signed receipt (the service seals it upper-cased)",
  items: "are required in a signed receipt: generated mock items cannot be signed",
  amount: "is required in a signed payment: the service seals the amount it charges",
};

/** Throws `invalid_request` naming each top-level field whose sealed value differs from the signed one. */
function assertSealedAsSigned(signed: { [name: string]: Json }, sealed: { [name: string]: Json }): void {
  const violations = new Violations();
  for (const name of new Set([...Object.keys(signed), ...Object.keys(sealed)])) {
    const [a, b] = [signed[name], sealed[name]];
    if (a === undefined || b === undefined ? a !== b : canonicalJsonOf(a) !== canonicalJsonOf(b)) {
      violations.add(
        name,
        SEALED_FORM_HINTS[name] ?? "must be sent in a signed receipt exactly as the service seals it",
      );
    }
  }
  violations.throwIfAny(
    "A signed receipt must be sent exactly as the service seals it, so that the cardholder can verify the signature.",
  );
}

/** Ed25519 verification; a stored key that does not parse is a bug (500), not a bad signature. */
function verifies(data: Buffer, spki: string, signature: Buffer): boolean {
  const key = createPublicKey({ key: Buffer.from(spki, "base64"), format: "der", type: "spki" });
  return verify(null, data, key, signature);
}

function signatureError(problem: string): AppError {
  return new AppError("invalid_signature", `The X-Receipt-Signature header ${problem}.`, {
    violations: [{ field: "X-Receipt-Signature", description: problem }],
  });
}
