/**
 * The receipt service's TypeScript client (the package `receipt-encryption-client`): a typed,
 * retrying RPC client for issuers and merchants, and WebCrypto helpers that seal, sign, open and
 * verify receipts on the device, both key suites (RSA-OAEP-256 and HPKE-P256-SHA256-A256GCM).
 *
 * This entry point runs wherever there is `fetch` and WebCrypto: Node 22+, browsers, React Native
 * with a WebCrypto polyfill (client/README.md says what it needs). Node's extras (gRPC over HTTP/2)
 * are in `./node.js`; the receipt picture (`renderReceiptSvg`) in `./receipt-image.js`, so that an
 * app that does not draw receipts does not load the renderer.
 */

export { isServiceErrorCode, SERVICE_ERROR_CODES, type ServiceErrorCode } from "../error-codes.js";
export type { TrustPolicy } from "../kt/policy.js";
export type { KtBinding, KtLookupAnswer } from "../kt/wire.js";
export {
  type CallOptions,
  type CreateOptions,
  createReceiptsClient,
  DEFAULT_TIMEOUT_MS,
  type Gateway,
  type ListPaymentsOptions,
  type ListReceiptsOptions,
  type ReceiptInput,
  type ReceiptsClient,
  type ReceiptsClientOptions,
  type SendReceiptOptions,
} from "./client.js";
export {
  checkRegistration,
  checkSelf,
  type DeviceCheckCode,
  DeviceCheckError,
  type DeviceRegistration,
  type HeldBinding,
  parAnswerOf,
  type RegistrationCheckContext,
  registerDeviceKey,
} from "./device-checks.js";
export {
  type ApiFieldViolation,
  codeFromConnectCode,
  ReceiptsApiError,
  type ReceiptsErrorCode,
  type TransportErrorCode,
} from "./errors.js";
export {
  type CardBindingsInput,
  DEFAULT_VALID_DAYS,
  type EscrowKeyInput,
  escrowKeyStatement,
  generateIssuerSigner,
  type IssuerSigner,
  type IssuerSigningKey,
  issuerSigningKeyOf,
  type KeyBindingInput,
  type KeyRevocationInput,
  keyBindingStatement,
  keyRevocationStatement,
  type RootRotationInput,
  type SigningKeyRevocationInput,
  signCardBindings,
  signRootRotation,
  signSigningKeyRevocation,
  signStatement,
  statementOf,
} from "./key-binding.js";
export {
  type KeyRing,
  keyIdOf,
  type OpenedReceipt,
  type OpenListingOptions,
  openListing,
  openReceiptWithKeyRing,
} from "./key-ring.js";
export {
  type CardIdentity,
  createKeyTrust,
  type KeyTrust,
  type KeyTrustOptions,
  type KeyVerificationCheck,
  KeyVerificationError,
  type NewestBinding,
  type VerifiedKey,
} from "./key-trust.js";
export {
  type CardTransaction,
  DETAILS_CEILING,
  MATCH_THRESHOLD,
  matchStatement,
  matchTransaction,
  type StatementMatch,
  type TransactionMatch,
} from "./match.js";
export {
  type MerchantReceipt,
  type MerchantSigner,
  type SealAndStoreOptions,
  type SealedAndStored,
  sealAndStoreReceipt,
} from "./merchant.js";
export {
  BASE_DELAY_MS,
  isRetryable,
  MAX_ATTEMPTS,
  MAX_RETRY_AFTER_MS,
  type RetryOptions,
  type Sleep,
} from "./retry.js";
export {
  checkReceiptSignature,
  type SignatureCheck,
  type SignatureStatus,
  type SigningKeyInfo,
  type SigningKeySource,
} from "./signatures.js";
export {
  generateSigningKey,
  type SigningKeyPair,
  signableReceipt,
  signReceipt,
  signReceiptJson,
} from "./signing.js";
export { fetchTransport } from "./transport.js";
export {
  EnvelopeError,
  type EnvelopeErrorCode,
  HPKE_KEY_WRAP_ALGORITHM,
  importP256Key,
  importRsaKey,
  KEY_WRAP_ALGORITHM,
  type KeyWrapAlgorithm,
  type LookupAnswerLike,
  openReceipt,
  type PrivateKeyInput,
  type ReceiptEnvelope,
  type ReceiptJson,
  type ReceiptLineItemJson,
  type ReceiptTaxJson,
  type ReceiptTaxLineJson,
  type ReceiptTenderJson,
  type RewrapTarget,
  rewrapKeyBundle,
  type SealedEnvelope,
  type SealIdentity,
  type SealTrust,
  sealReceipt,
  type WebCryptoKey,
  type WebCryptoKeyPair,
} from "./webcrypto.js";
export {
  verifyWebhook,
  type WebhookEvent,
  type WebhookHeaders,
  WebhookVerificationError,
  type WebhookVerifyOptions,
} from "./webhooks.js";
