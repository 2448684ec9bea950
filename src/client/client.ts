/* Over 400 lines on purpose: the client library's one interface (ReceiptsClient) with its options
 * and its implementation, one method per RPC; most of the length is their doc comments. */
import type { MessageInitShape } from "@bufbuild/protobuf";
import { type Timestamp, timestampDate } from "@bufbuild/protobuf/wkt";
import {
  Code,
  type CallOptions as ConnectCallOptions,
  ConnectError,
  createClient,
  type Transport,
} from "@connectrpc/connect";
import {
  type GrantAccessResponse,
  KeysService,
  type ListAuditEventsResponse,
  type LookupKeyResponse,
  type RegisterEscrowKeyResponse,
} from "../../gen/receipts/v1/keys_pb.js";
import {
  type DeleteUserResponse,
  type GenerateKeysResponse,
  OnboardingService,
  type RegisterResponse,
} from "../../gen/receipts/v1/onboarding_pb.js";
import {
  type CreatePaymentResponse,
  type ListPaymentsResponse,
  type Payment,
  PaymentsService,
  type RefundPaymentResponse,
} from "../../gen/receipts/v1/payments_pb.js";
import type { EncryptedReceipt, Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import {
  type EscrowReleaseSchema,
  type ListPendingEscrowResponse,
  type ListReceiptsResponse,
  type MerchantSigningKey,
  ReceiptsService,
  type RegisterSigningKeyResponse,
  type ReleaseEscrowResponse,
  type StoreSealedReceiptRequestSchema,
} from "../../gen/receipts/v1/receipts_pb.js";
import type { KtBinding } from "../kt/wire.js";
import { toApiError } from "./errors.js";
import { type RetryOptions, realSleep, retryPolicyOf, type Sleep, withRetry } from "./retry.js";
import type { SigningKeyInfo } from "./signatures.js";
import { type MerchantSigner, type ReceiptInput, signableReceipt, signReceipt } from "./signing.js";
import { fetchTransport } from "./transport.js";

/** A payment gateway. */

/**
 * The card a merchant names: its hashed PAN, or its PAR when it has no card number (a
 * wallet tap): exactly one. `cardBin` is the card's (or, for a tap, the wallet token's) first digits.
 */
export interface MerchantCard {
  recipientHashedPan?: string;
  recipientPar?: string;
  cardBin?: string;
}

export type Gateway = "gateway_a" | "gateway_b";

export type { ReceiptInput };

/** Per-call options of every client method. */
export interface CallOptions {
  /** Aborts the call, including any wait between attempts. */
  signal?: AbortSignal;
}

/** Per-call options of the creates (`createPayment`, `encryptReceipt`, `storeSealedReceipt`). */
export interface CreateOptions extends CallOptions {
  /** The `Idempotency-Key` of this logical call; by default a fresh one from the client's generator. */
  idempotencyKey?: string;
}

/** Options of `encryptReceipt`, `createPayment` and `refundPayment`. */
export interface SendReceiptOptions extends CreateOptions {
  /**
   * Signs the receipt with the merchant's registered signing key and sends the signature as
   * `X-Receipt-Signature` (required once the merchantId has a signing key). The receipt is sent as
   * signed: `version` "1.0" when unset, the currency upper-cased.
   */
  signer?: MerchantSigner;
}

/** Options of `listPayments`; `pageSize` defaults to 50 on the server, at most 200. */
export interface ListPaymentsOptions extends CallOptions {
  pageSize?: number;
  /** The `nextPageToken` of the previous page; empty or unset for the first page. */
  pageToken?: string;
}

/** Options of `listReceipts`; `pageSize` defaults to 50 on the server, at most 200. */
export interface ListReceiptsOptions extends CallOptions {
  pageSize?: number;
  /** The `nextPageToken` of the previous page; empty or unset for the first page. */
  pageToken?: string;
}

/** Options of {@link createReceiptsClient}. */
export interface ReceiptsClientOptions {
  /** The service's base URL, e.g. `http://localhost:8080`. */
  baseUrl: string;
  /** The API key (`rk_<env>_...`), sent as `x-api-key` on every call. */
  apiKey: string;
  /**
   * How to reach the service: `connect` (the default: the Connect protocol over the platform's
   * `fetch`, in Node 22+, browsers and React Native alike), or a ready-made Connect `Transport` (e.g.
   * gRPC-Web from `@connectrpc/connect-web`). gRPC over HTTP/2 needs Node: import
   * `createReceiptsClient` from the `/node` entry point and pass `grpc`.
   */
  transport?: "connect" | Transport;
  /**
   * Attempts and delays; the defaults are the retry rules (3 attempts, 1 s, 2 s), and a
   * `Retry-After` over 10 s fails the call at once instead of waiting (`maxRetryAfterMs`).
   */
  retry?: RetryOptions;
  /** Waits between attempts; inject a fake in tests. Default: a timer. */
  sleep?: Sleep;
  /** Generates `Idempotency-Key` values for creates. Default: `crypto.randomUUID()`. */
  idempotencyKey?: () => string;
  /** Deadline of each attempt, in milliseconds; a timed-out attempt is retried. 0 disables. Default 30 000. */
  timeoutMs?: number;
  /** A ready-made transport used instead of the one `baseUrl` and `transport` describe (tests). */
  transportOverride?: Transport;
  /** The `fetch` of the default transport; default: the platform's. */
  fetch?: typeof fetch;
}

/** Default deadline of one attempt, in milliseconds: generous for key generation on a busy server. */
export const DEFAULT_TIMEOUT_MS = 30_000;

/**
 * A typed client of the receipt service for both roles (issuer and merchant). Every method retries
 * transient failures by the retry rules (README, "TypeScript client") and throws a `ReceiptsApiError` when it
 * gives up.
 */
export interface ReceiptsClient {
  /**
   * Issuer: generates a key pair on the server (RSA-2048 by default, or `HPKE-P256-SHA256-A256GCM`);
   * the private key is returned once and never kept. A device that can make its own key (a P-256 key
   * in secure hardware) should, and only register its public key.
   */
  generateKeys(options?: CallOptions & { algorithm?: string }): Promise<GenerateKeysResponse>;
  /**
   * Issuer: registers a cardholder's public key under the card's hashed PAN, its PAR, or both
   * (rotates an existing key). With the issuer's signed `binding` (`signStatement`), the answer comes
   * once the binding is in the key log, with its proofs: check it on the device with
   * `registerDeviceKey` (or `checkRegistration`). A card registered by both references takes one
   * binding per reference (`signCardBindings`): `binding` for the hashed PAN, `parBinding` for the
   * PAR, whose proofs the answer carries in `parAnswer`.
   */
  register(
    request: {
      hashedPan?: string;
      par?: string;
      publicKey: string;
      keyId: string;
      cardBin?: string;
      binding?: KtBinding;
      parBinding?: KtBinding;
    },
    options?: CallOptions,
  ): Promise<RegisterResponse>;
  /** Issuer: a 2-3 minute decrypt grant for a user's key, after the user consented on the device. */
  grantAccess(
    request: { userId: string; keyId: string },
    options?: CallOptions,
  ): Promise<GrantAccessResponse>;
  /**
   * Merchant: seals a receipt to its recipient (or escrow) and stores it. Sends an `Idempotency-Key`;
   * the receipt's unique `(merchantId, receiptId)` is what keeps a retry from storing it twice (a
   * retry after a lost response gets `conflict`).
   */
  encryptReceipt(receipt: ReceiptInput, options?: SendReceiptOptions): Promise<EncryptedReceipt>;
  /**
   * Merchant: charges through a gateway and stores the payment with its sealed receipt. Every
   * attempt of one call sends the same `Idempotency-Key`, so a retry never pays twice.
   */
  createPayment(
    gateway: Gateway,
    receipt: ReceiptInput,
    options?: SendReceiptOptions,
  ): Promise<CreatePaymentResponse>;
  /** Merchant: one of its payments (amounts, status, refunds; never the receipt's content). */
  getPayment(paymentId: string, options?: CallOptions): Promise<Payment>;
  /** Merchant: one page of its tenant's payments, newest first. */
  listPayments(options?: ListPaymentsOptions): Promise<ListPaymentsResponse>;
  /**
   * Merchant: refunds `receipt.amount` of a payment with a refund receipt (`receiptType: "refund"`,
   * `originalReceiptId` the payment's receipt), or a `sealedReceipt`. Every attempt of one call
   * sends the same `Idempotency-Key`, so a retry never refunds twice. A refund receipt in the clear
   * of a merchantId with a signing key needs `signer`, as the creates do.
   */
  refundPayment(
    paymentId: string,
    receipt: ReceiptInput,
    options?: SendReceiptOptions,
  ): Promise<RefundPaymentResponse>;
  /**
   * Issuer: decrypts a payment's receipt on the server. The private key crosses the network; prefer
   * `openReceipt` on the device where possible.
   */
  decryptPayment(
    request: { paymentId: string; tokenId: string; privateKey: string },
    options?: CallOptions,
  ): Promise<Receipt>;
  /** Issuer: decrypts a stored receipt on the server; `merchantId` when two merchants used the receiptId. */
  decryptReceipt(
    request: { receiptId: string; tokenId: string; privateKey: string; merchantId?: string },
    options?: CallOptions,
  ): Promise<Receipt>;
  /** Issuer: one page of a user's sealed receipts, newest first. */
  listReceipts(userId: string, options?: ListReceiptsOptions): Promise<ListReceiptsResponse>;
  /** Issuer: every sealed receipt of a user, newest first, fetching page after page as it is iterated. */
  listAllReceipts(
    userId: string,
    options?: Omit<ListReceiptsOptions, "pageToken">,
  ): AsyncGenerator<EncryptedReceipt, void, undefined>;
  /** Merchant: its own sealed receipt of a transaction; `merchantId` when the transactionId is ambiguous. */
  getTransactionReceipt(
    transactionId: string,
    merchantId?: string,
    options?: CallOptions,
  ): Promise<EncryptedReceipt>;
  /** Merchant: the key a receipt for this card (by hashed PAN or by PAR) is sealed to now. */
  lookupKey(request: MerchantCard, options?: CallOptions): Promise<LookupKeyResponse>;
  /** Merchant: stores a receipt sealed on the merchant's side (`sealAndStoreReceipt` does it all). */
  storeSealedReceipt(
    request: MessageInitShape<typeof StoreSealedReceiptRequestSchema>,
    options?: CreateOptions,
  ): Promise<EncryptedReceipt>;
  /**
   * Issuer: registers an escrow public key of the tenant; receipts escrowed for it are sealed to it.
   * `binding`: its signed `receipts.v1/escrow-key` statement (`escrowKeyStatement`, `signStatement`),
   * required once the tenant set `requireBindings`.
   */
  registerEscrowKey(
    publicKey: string,
    options?: CallOptions & { binding?: KtBinding },
  ): Promise<RegisterEscrowKeyResponse>;
  /** Issuer: receipts escrowed for the tenant under its own escrow keys, for one card. */
  listPendingEscrow(
    request: { hashedPan?: string; par?: string; pageSize?: number; pageToken?: string },
    options?: CallOptions,
  ): Promise<ListPendingEscrowResponse>;
  /** Issuer: hands back key bundles re-wrapped on the issuer's side to the user's active key. */
  releaseEscrow(
    request: { userId: string; receipts: MessageInitShape<typeof EscrowReleaseSchema>[] },
    options?: CallOptions,
  ): Promise<ReleaseEscrowResponse>;
  /**
   * Issuer: erases a user, its keys, grants and receipts. Pass `{userId, revocations}` to revoke the
   * card's logged binding in the same step: one signed `keyRevocationStatement` (reason "erased") per
   * card reference with a binding in the key log (required when the issuer set requireBindings).
   */
  deleteUser(
    request: string | { userId: string; revocations?: KtBinding[] },
    options?: CallOptions,
  ): Promise<DeleteUserResponse>;
  /**
   * Merchant: registers the Ed25519 public key (`generateSigningKey().publicKey`) that signs a
   * merchantId's receipts, or replaces it. From then on every receipt of the merchantId must be
   * signed: pass `signer: { merchantKeyId, privateKey }` to `encryptReceipt`, `createPayment` and
   * `refundPayment`.
   */
  registerSigningKey(
    request: { merchantId: string; publicKey: string },
    options?: CallOptions,
  ): Promise<RegisterSigningKeyResponse>;
  /**
   * Issuer: a merchantId's public signing keys, as `openListing`'s `signingKeys` takes them: e.g.
   * `openListing(receipts, ring, { signingKeys: (m) => client.signingKeysFor(m) })`.
   */
  signingKeysFor(merchantId: string, options?: CallOptions): Promise<SigningKeyInfo[]>;
  /** Issuer: one page of the tenant's audit log, oldest first; poll with the last `nextPageToken`. */
  listAuditEvents(
    request?: { after?: string; pageSize?: number; pageToken?: string },
    options?: CallOptions,
  ): Promise<ListAuditEventsResponse>;
}

/**
 * Creates a {@link ReceiptsClient}. Throws `RangeError` / `TypeError` for invalid options, so that a
 * misconfiguration fails at start-up rather than on the first call.
 */
export function createReceiptsClient(options: ReceiptsClientOptions): ReceiptsClient {
  if (options.apiKey === "") throw new TypeError("apiKey must not be empty");
  const { call, idempotencyHeader } = callerOf(options);
  const transport = withHeader(transportOf(options), "x-api-key", options.apiKey);

  const onboarding = createClient(OnboardingService, transport);
  const keys = createClient(KeysService, transport);
  const receipts = createClient(ReceiptsService, transport);
  const payments = createClient(PaymentsService, transport);
  const listReceipts = (userId: string, options: ListReceiptsOptions = {}) =>
    call(options, (o) =>
      receipts.listReceipts(
        { userId, pageSize: options.pageSize ?? 0, pageToken: options.pageToken ?? "" },
        o,
      ),
    );

  return {
    generateKeys: (options) =>
      call(options, (o) => onboarding.generateKeys({ algorithm: options?.algorithm ?? "" }, o)),
    register: (request, options) => call(options, (o) => onboarding.register(request, o)),
    grantAccess: (request, options) => call(options, (o) => keys.grantAccess(request, o)),
    encryptReceipt: async (receipt, options) => {
      const { body, headers } = await signed(receipt, options, idempotencyHeader(options));
      return call(
        options,
        async (o) => present((await receipts.encryptReceipt({ receipt: body }, o)).receipt),
        headers,
      );
    },
    createPayment: async (gateway, receipt, options) => {
      const { body, headers } = await signed(receipt, options, idempotencyHeader(options));
      return call(options, (o) => payments.createPayment({ gateway, receipt: body }, o), headers);
    },
    getPayment: (paymentId, options) =>
      call(options, async (o) => present((await payments.getPayment({ paymentId }, o)).payment)),
    listPayments: (options = {}) =>
      call(options, (o) =>
        payments.listPayments({ pageSize: options.pageSize ?? 0, pageToken: options.pageToken ?? "" }, o),
      ),
    refundPayment: async (paymentId, receipt, options) => {
      const { body, headers } = await signed(receipt, options, idempotencyHeader(options));
      return call(options, (o) => payments.refundPayment({ paymentId, receipt: body }, o), headers);
    },
    decryptPayment: (request, options) =>
      call(options, async (o) => present((await payments.decryptPayment(request, o)).receipt)),
    decryptReceipt: (request, options) =>
      call(options, async (o) => present((await receipts.decryptReceipt(request, o)).receipt)),
    listReceipts,
    listAllReceipts: (userId, options = {}) => allPages(listReceipts, userId, options),
    getTransactionReceipt: (transactionId, merchantId = "", options) =>
      call(options, async (o) =>
        present((await receipts.getTransactionReceipt({ transactionId, merchantId }, o)).receipt),
      ),
    lookupKey: (request, options) => call(options, (o) => keys.lookupKey(request, o)),
    storeSealedReceipt: (request, options) =>
      call(
        options,
        async (o) => present((await receipts.storeSealedReceipt(request, o)).receipt),
        idempotencyHeader(options),
      ),
    registerEscrowKey: (publicKey, options) =>
      call(options, (o) => keys.registerEscrowKey(escrowKeyRequest(publicKey, options?.binding), o)),
    listPendingEscrow: (request, options) => call(options, (o) => receipts.listPendingEscrow(request, o)),
    releaseEscrow: (request, options) => call(options, (o) => receipts.releaseEscrow(request, o)),
    deleteUser: (request, options) => call(options, (o) => onboarding.deleteUser(erasureRequest(request), o)),
    registerSigningKey: (request, options) => call(options, (o) => receipts.registerSigningKey(request, o)),
    signingKeysFor: (merchantId, options) =>
      call(options, async (o) =>
        (await receipts.listSigningKeys({ merchantId }, o)).signingKeys.map(signingKeyInfoOf),
      ),
    listAuditEvents: (request = {}, options = undefined) =>
      call(options, (o) =>
        keys.listAuditEvents(
          { after: request.after ?? "", pageSize: request.pageSize ?? 0, pageToken: request.pageToken ?? "" },
          o,
        ),
      ),
  };
}

/** `deleteUser`'s request: a bare userId, or the userId with the card's signed revocations. */
function erasureRequest(request: string | { userId: string; revocations?: KtBinding[] }) {
  return typeof request === "string" ? { userId: request } : request;
}

/** A listed signing key in the form the signature check takes (times as Dates). */
function signingKeyInfoOf(key: MerchantSigningKey): SigningKeyInfo {
  const date = (t: Timestamp | undefined) => (t === undefined ? undefined : timestampDate(t));
  return {
    merchantKeyId: key.merchantKeyId,
    publicKey: key.publicKey,
    registeredAt: date(key.registeredAt) ?? new Date(0),
    replacedAt: date(key.replacedAt),
    revokedAt: date(key.revokedAt),
    allReceiptsSigned: key.allReceiptsSigned,
  };
}

/** The signature header of a receipt (`x-receipt-signature`, as gRPC metadata and HTTP alike). */
const SIGNATURE_HEADER = "x-receipt-signature";

/**
 * A receipt and the headers to send it with: as given without a signer; with one, made signable,
 * signed, and the signature added to `headers`.
 */
async function signed(
  receipt: ReceiptInput,
  options: SendReceiptOptions | undefined,
  headers: Record<string, string>,
): Promise<{ body: ReceiptInput; headers: Record<string, string> }> {
  if (options?.signer === undefined) return { body: receipt, headers };
  const body = signableReceipt(receipt);
  const signature = await signReceipt(body, options.signer.privateKey);
  return { body, headers: { ...headers, [SIGNATURE_HEADER]: signature } };
}

/**
 * One logical call: `attempt` is retried by the client's policy, and every attempt gets the same
 * headers (so the same idempotency key), deadline and abort signal.
 */
type Call = <T>(
  options: CallOptions | undefined,
  attempt: (callOptions: ConnectCallOptions) => Promise<T>,
  headers?: Record<string, string>,
) => Promise<T>;

/**
 * How the client makes its calls, from its retry, sleep, idempotency-key and timeout options (throws
 * `RangeError` for invalid ones): {@link Call}, and the `Idempotency-Key` header of a create.
 */
function callerOf(options: ReceiptsClientOptions): {
  call: Call;
  idempotencyHeader: (options: CreateOptions | undefined) => Record<string, string>;
} {
  const policy = retryPolicyOf(options.retry);
  const sleep = options.sleep ?? realSleep;
  const newIdempotencyKey = options.idempotencyKey ?? (() => globalThis.crypto.randomUUID());
  const timeoutMs = timeoutOf(options.timeoutMs);
  const baseUrl = options.baseUrl;
  return {
    call: (options, attempt, headers = {}) => {
      const callOptions: ConnectCallOptions = { headers };
      if (timeoutMs !== undefined) callOptions.timeoutMs = timeoutMs;
      if (options?.signal !== undefined) callOptions.signal = options.signal;
      return withRetry(() => attempt(callOptions), policy, sleep, options?.signal, baseUrl);
    },
    idempotencyHeader: (options) => ({
      "idempotency-key": options?.idempotencyKey ?? newIdempotencyKey(),
    }),
  };
}

/** A RegisterEscrowKey request: the key, and its signed statement when the issuer gave one. */
function escrowKeyRequest(publicKey: string, binding: KtBinding | undefined) {
  return binding === undefined ? { publicKey } : { publicKey, binding };
}

/**
 * Every receipt of a user, page after page. A server that hands back the token it was given would
 * loop forever: that is `DataLoss`, thrown as an API error.
 */
async function* allPages(
  listReceipts: (userId: string, options: ListReceiptsOptions) => Promise<ListReceiptsResponse>,
  userId: string,
  options: ListReceiptsOptions,
): AsyncGenerator<EncryptedReceipt, void, undefined> {
  let pageToken = "";
  do {
    const page = await listReceipts(userId, { ...options, pageToken });
    yield* page.receipts;
    if (page.nextPageToken !== "" && page.nextPageToken === pageToken) {
      const loop = new ConnectError("The server returned the same page token twice.", Code.DataLoss);
      throw toApiError(loop, 1, false);
    }
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
}

function transportOf(options: ReceiptsClientOptions): Transport {
  if (options.transportOverride !== undefined) return options.transportOverride;
  const transport = options.transport ?? "connect";
  if (transport === "connect") return fetchTransport(options.baseUrl, options.fetch);
  if (typeof transport === "object" && transport !== null) return transport;
  if ((transport as string) === "grpc") {
    throw new RangeError(
      'transport "grpc" needs Node: import createReceiptsClient from the "/node" entry point',
    );
  }
  throw new RangeError(`transport must be "connect" or a Transport, not ${JSON.stringify(transport)}`);
}

function timeoutOf(timeoutMs: number | undefined): number | undefined {
  if (timeoutMs === undefined) return DEFAULT_TIMEOUT_MS;
  if (!Number.isFinite(timeoutMs) || timeoutMs < 0) {
    throw new RangeError("timeoutMs must be a non-negative number of milliseconds");
  }
  return timeoutMs === 0 ? undefined : timeoutMs;
}

/**
 * The client's interceptor: wraps any transport (a real one or a test's) so that every request, each
 * retry included, carries the header. `createClient` takes no interceptors of its own, and the
 * transports take theirs only when built, which `transportOverride` is not.
 */
function withHeader(transport: Transport, name: string, value: string): Transport {
  const add = (init: ConstructorParameters<typeof Headers>[0]): Headers => {
    const header = new Headers(init);
    header.set(name, value);
    return header;
  };
  return {
    unary: (method, signal, timeoutMs, header, input, contextValues) =>
      transport.unary(method, signal, timeoutMs, add(header), input, contextValues),
    stream: (method, signal, timeoutMs, header, input, contextValues) =>
      transport.stream(method, signal, timeoutMs, add(header), input, contextValues),
  };
}

/**
 * The message of a response that must carry one. Its absence is a broken server, not a transient
 * failure: `DataLoss`, which is never retried.
 */
function present<T>(value: T | undefined): T {
  if (value === undefined) throw new ConnectError("The response has no receipt.", Code.DataLoss);
  return value;
}
