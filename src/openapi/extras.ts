import type { DescMethod, JsonObject } from "@bufbuild/protobuf";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { IDEMPOTENCY_KEY_PATTERN } from "../domain/idempotency.js";
import type { ErrorCode } from "../errors.js";
import { API_SERVICES, policyOf } from "../rpc/policy.js";

/**
 * The HTTP facts of an operation that a `google.api.http` rule cannot express: request headers it
 * reads and error codes only it can return. The headers come from each RPC's policy (the
 * `(receipts.v1.policy)` option: `idempotent` reads `Idempotency-Key`, `signed` reads
 * `X-Receipt-Signature` and can answer `invalid_signature`); the few error codes of the decrypts and
 * of payments are the one hand-written part, keyed by RPC so a renamed method fails the OpenAPI tests.
 */

/** A request header parameter, stored once under `components.parameters[id]`. */
export interface HeaderParameter {
  /** Component name, e.g. `IdempotencyKey`. */
  id: string;
  /** Header name as sent, e.g. `Idempotency-Key`. */
  name: string;
  required: boolean;
  description: string;
  schema: JsonObject;
}

/** What an operation has beyond its proto declaration. */
export interface OperationExtras {
  headers?: readonly HeaderParameter[];
  /** Codes this operation can return that other operations cannot (see {@link methodSpecificCodes}). */
  errors?: readonly ErrorCode[];
}

/**
 * `Idempotency-Key` of the creates (payments, and receipts encrypted or sealed): a retry with the same
 * key never pays or stores twice.
 */
export const IDEMPOTENCY_KEY: HeaderParameter = {
  id: "IdempotencyKey",
  name: "Idempotency-Key",
  required: false,
  description:
    "Makes the call safe to retry: a retry with the same key and body returns the first response, " +
    "marked `Idempotent-Replayed: true`, and creates nothing; the same key with a different body is " +
    "`conflict`. Kept 24 hours, per API key. Without it, sending the same receiptId (or, for a payment, " +
    "the same merchantId and transactionId) again is `conflict`, naming what exists.",
  schema: { type: "string", minLength: 1, maxLength: 255, pattern: IDEMPOTENCY_KEY_PATTERN },
};

/**
 * `X-Receipt-Signature` (README, "Merchant signatures"): the merchant's Ed25519 signature over the receipt
 * fields.
 */
export const RECEIPT_SIGNATURE: HeaderParameter = {
  id: "ReceiptSignature",
  name: "X-Receipt-Signature",
  required: false,
  description:
    "Base64 Ed25519 signature over the RFC 8785 canonical JSON of the receipt fields (the body without " +
    'recipientHashedPan, recipientPar, mockItems, cardNonce and cardBin, and without every member whose value is null, "" or ' +
    "[], at any depth). Required once the merchantId has a registered signing key " +
    "(`POST /api/v1/receipts/signing-keys`); missing or wrong is `invalid_signature`; ignored otherwise.",
  schema: { type: "string", format: "byte", contentEncoding: "base64" },
};

/**
 * `X-Request-Id`, accepted on every request and echoed on every response (README, "Responses and errors").
 */
export const REQUEST_ID: HeaderParameter = {
  id: "RequestId",
  name: "X-Request-Id",
  required: false,
  description:
    "The caller's request id, echoed in the response and logs when it is a sane token of at most 128 " +
    "characters (letters, digits, `._:-`); otherwise the service assigns a new one.",
  schema: { type: "string", pattern: "^[A-Za-z0-9._:-]{1,128}$" },
};

/** `Service/Method` of an RPC, the key of {@link DEFAULT_EXTRAS}. */
export function rpcName(method: DescMethod): string {
  return `${method.parent.typeName}/${method.name}`;
}

/**
 * Error codes only one operation can return, beyond those its policy brings. integrity_failure on
 * encrypt, create and refund: the recipient's key does not verify against the key log (requireBindings).
 */
const SPECIFIC_ERRORS: ReadonlyMap<string, readonly ErrorCode[]> = new Map<string, readonly ErrorCode[]>([
  [rpcName(ReceiptsService.method.encryptReceipt), ["integrity_failure"]],
  [rpcName(PaymentsService.method.createPayment), ["payment_declined", "integrity_failure"]],
  [rpcName(PaymentsService.method.refundPayment), ["integrity_failure"]],
  [rpcName(ReceiptsService.method.decryptReceipt), ["integrity_failure"]],
  [rpcName(PaymentsService.method.decryptPayment), ["integrity_failure"]],
]);

/** The extras of one RPC: the headers and codes of its policy, then its own codes. */
function extrasOf(method: DescMethod): OperationExtras | undefined {
  const policy = policyOf(method);
  const signed = policy !== "public" && policy.signed;
  const headers = [
    ...(policy !== "public" && policy.idempotent ? [IDEMPOTENCY_KEY] : []),
    ...(signed ? [RECEIPT_SIGNATURE] : []),
  ];
  const errors: ErrorCode[] = [
    ...(signed ? (["invalid_signature"] as const) : []),
    ...(SPECIFIC_ERRORS.get(rpcName(method)) ?? []),
  ];
  if (headers.length === 0 && errors.length === 0) return undefined;
  return { ...(headers.length === 0 ? {} : { headers }), ...(errors.length === 0 ? {} : { errors }) };
}

/** The extras of the API services' operations. */
export const DEFAULT_EXTRAS: ReadonlyMap<string, OperationExtras> = new Map(
  API_SERVICES.flatMap((service) =>
    service.methods.flatMap((method) => {
      const extras = extrasOf(method);
      return extras === undefined ? [] : [[rpcName(method), extras] as const];
    }),
  ),
);

/** Codes that only the operations whose extras list them can return. */
export function methodSpecificCodes(extras: ReadonlyMap<string, OperationExtras>): Set<ErrorCode> {
  return new Set([...extras.values()].flatMap((e) => e.errors ?? []));
}
