/**
 * The receipt service's TypeScript client: a typed, retrying RPC client for issuers and merchants,
 * and WebCrypto helpers that open and seal receipts locally. The RPC client uses Node transports;
 * a browser or React Native app that only opens receipts imports `./webcrypto.js` directly.
 */

export {
  type CallOptions,
  type CreateOptions,
  createReceiptsClient,
  DEFAULT_TIMEOUT_MS,
  type Gateway,
  type ListReceiptsOptions,
  type ReceiptInput,
  type ReceiptsClient,
  type ReceiptsClientOptions,
} from "./client.js";
export {
  type ApiFieldViolation,
  codeFromConnectCode,
  ReceiptsApiError,
  type ReceiptsErrorCode,
  type TransportErrorCode,
} from "./errors.js";
export {
  BASE_DELAY_MS,
  isRetryable,
  MAX_ATTEMPTS,
  MAX_RETRY_AFTER_MS,
  type RetryOptions,
  type Sleep,
} from "./retry.js";
export {
  EnvelopeError,
  type EnvelopeErrorCode,
  importRsaKey,
  KEY_WRAP_ALGORITHM,
  openReceipt,
  type ReceiptEnvelope,
  type ReceiptJson,
  type ReceiptLineItemJson,
  type ReceiptTaxJson,
  type SealedEnvelope,
  type SealIdentity,
  sealReceipt,
  type WebCryptoKey,
} from "./webcrypto.js";
