import type { KeyBundle } from "../../gen/receipts/v1/receipt_pb.js";
import { base64OfBytes } from "../base64-text.js";
import { isKeyAlgorithm, KEY_ALGORITHMS } from "../crypto/suites.js";
import { AppError, Violations } from "../errors.js";
import type { ApiKeyRecord } from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import { admitToEscrow } from "./escrow.js";
import { checkKeyBundle, checkSealedBytes } from "./key-bundles.js";
import { assertMerchantIdUsable } from "./merchants.js";
import { checkReceiptIdentity, type ReceiptIdentityInput } from "./receipt-rules.js";
import { type CardRef, checkCardRef, recipientOf } from "./routing.js";
import { type PreparedReceipt, preparedFor, receiptRecordOf } from "./sealing.js";

/**
 * Merchant-side sealing: a receipt the merchant sealed on its side, to the key that
 * look-up gave it. The service never sees the content; it checks what it can (ids, sizes, that the
 * bundle names the key the card routes to now) and stores it as if it had sealed it itself. The AAD
 * binds the ids, so a device refuses an envelope moved to another receipt.
 */

/** A receipt sealed by the merchant, after transport decoding (the REST body or a `sealedReceipt`). */
export interface SealedInput extends CardRef, ReceiptIdentityInput {
  keyBundle?: KeyBundle | undefined;
  ciphertext: Uint8Array;
  iv: Uint8Array;
  authTag: Uint8Array;
}

/**
 * Validates a merchant-sealed receipt and builds its record (not yet stored): every field problem at
 * once (`invalid_request`), then the recipient: a bundle naming another key than the card routes to
 * now is `conflict` ("look it up again"). Writes nothing: the caller claims the merchantId just
 * before it stores the record. `prefix` is where the sealed parts, `version` and `receiptId`
 * sit in the request, for error messages: "" for /receipts/sealed, "sealedReceipt." for a payment.
 */
export async function prepareSealed(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: SealedInput,
  prefix: string,
  paymentId?: string,
): Promise<PreparedReceipt> {
  const v = new Violations();
  const identity = checkReceiptIdentity(v, input, prefix);
  checkCardRef(input, v);
  checkSealedBytes(v, input, prefix);
  const bundleField = `${prefix}keyBundle`;
  const bundle = input.keyBundle;
  if (bundle === undefined) v.add(bundleField, "is required");
  else {
    if (bundle.keyId === "") v.add(`${bundleField}.keyId`, "is required: the keyId that look-up gave");
    if (!isKeyAlgorithm(bundle.algorithm)) {
      v.add(`${bundleField}.algorithm`, `must be ${KEY_ALGORITHMS.join(" or ")}`);
    }
  }
  v.throwIfAny();
  // Another tenant's merchantId is refused before anything about the card.
  await assertMerchantIdUsable(deps, principal, identity.merchantId);

  const recipient = await recipientOf(deps, input);
  if (bundle?.keyId !== recipient.key.keyId) {
    throw new AppError(
      "conflict",
      "The recipient's key changed: look it up again and seal to the key it gives.",
    );
  }
  const keyBundle = checkKeyBundle(v, bundleField, bundle, recipient.key);
  v.throwIfAny();
  // Only escrow is counted: a cardholder's receipt does not wait a turn for a call that returns at once.
  if (recipient.kind === "escrow") await admitToEscrow(deps, principal, recipient);
  if (keyBundle === undefined)
    throw new AppError("internal_server_error", "A checked key bundle is missing.");

  const record = receiptRecordOf(
    deps,
    principal,
    recipient,
    identity,
    {
      keyBundle,
      ciphertext: base64OfBytes(input.ciphertext),
      iv: base64OfBytes(input.iv),
      authTag: base64OfBytes(input.authTag),
    },
    paymentId,
  );
  return preparedFor(record, recipient);
}
