import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { type Code, ConnectError, createRouterTransport, type HandlerContext } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { OnboardingService } from "../../gen/receipts/v1/onboarding_pb.js";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import {
  type EncryptedReceipt,
  EncryptedReceiptSchema,
  type Receipt,
  ReceiptSchema,
} from "../../gen/receipts/v1/receipt_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import {
  createReceiptsClient,
  type ReceiptInput,
  type ReceiptsClientOptions,
} from "../../src/client/index.js";
import type { ErrorCode } from "../../src/errors.js";

/**
 * An in-memory receipt service that fails on purpose: each call takes the next scripted failure (a
 * `ConnectError` to throw, or "hang" to never answer) and succeeds once the script is used up. It
 * records every call's method, request and headers, so tests see each attempt as the server did.
 */

/** One call as the server received it. */
export interface RecordedCall {
  method: string;
  request: unknown;
  headers: Headers;
}

/** A scripted failure: an error to throw, or "hang" (no answer until the client gives up). */
export type Failure = ConnectError | "hang";

/** What the fake server answers when no failure is scripted; tests may replace entries. */
export interface Answers {
  listReceipts: (request: { userId: string; pageSize: number; pageToken: string }) => {
    receipts: EncryptedReceipt[];
    nextPageToken: string;
  };
}

/** An error as the service sends it: status, ErrorInfo reason, `x-request-id`, optional extras. */
export function serviceError(
  reason: ErrorCode | (string & {}),
  code: Code,
  extra: {
    requestId?: string;
    retryAfter?: string;
    violations?: { field: string; description: string }[];
    /** The ErrorInfo metadata: `doc_url`, `decline_code`, `payment_id`. */
    facts?: Record<string, string>;
  } = {},
): ConnectError {
  const metadata = new Headers({ "x-request-id": extra.requestId ?? "req-test" });
  if (extra.retryAfter !== undefined) metadata.set("retry-after", extra.retryAfter);
  const details: ConstructorParameters<typeof ConnectError>[3] = [
    { desc: ErrorInfoSchema, value: { reason, domain: "receipts.v1", metadata: extra.facts ?? {} } },
  ];
  if (extra.violations !== undefined) {
    details.push({ desc: BadRequestSchema, value: { fieldViolations: extra.violations } });
  }
  return new ConnectError(`${reason} on purpose`, code, metadata, details);
}

/** An error without ErrorInfo: what a proxy, the network or a timeout produces. */
export function bareError(code: Code, message = "no service reason"): ConnectError {
  return new ConnectError(message, code);
}

/** A sealed receipt as the fake server lists it. */
export function encryptedReceipt(receiptId: string): EncryptedReceipt {
  return create(EncryptedReceiptSchema, {
    version: "1.0",
    receiptId,
    keyId: "key-1",
    keyBundle: { encryptedAesKey: new Uint8Array([1, 2, 3]), keyId: "key-1", algorithm: "RSA-OAEP-256" },
    ciphertext: new Uint8Array([4, 5]),
    iv: new Uint8Array(12),
    authTag: new Uint8Array(16),
    merchantId: "m-1",
    transactionId: `t-${receiptId}`,
  });
}

/** A receipt as a merchant sends it. */
export const receiptInput: ReceiptInput = {
  version: "1.0",
  receiptId: "rcpt-1",
  merchantId: "m-1",
  merchantName: "Corner Café",
  transactionId: "txn-1",
  transactionDate: timestampFromDate(new Date("2026-01-01T10:00:00Z")),
  currency: "EUR",
  recipientHashedPan: "ab".repeat(32),
  amount: 1250n,
};

const decrypted = (receiptId: string): Receipt =>
  create(ReceiptSchema, { receiptId, merchantName: "Corner Café", amount: 1250n });

/** Creates the scripted server; {@link ScriptedServer.fail} queues failures. */
export function scriptedServer(answers: Partial<Answers> = {}) {
  const calls: RecordedCall[] = [];
  const script: Failure[] = [];
  const listReceipts: Answers["listReceipts"] =
    answers.listReceipts ??
    ((req) => ({ receipts: [encryptedReceipt(`${req.userId}-r1`)], nextPageToken: "" }));

  /** Records the call, then plays the next scripted failure, if any. */
  const enter = async (method: string, request: unknown, ctx: HandlerContext): Promise<void> => {
    calls.push({ method, request, headers: new Headers(ctx.requestHeader) });
    const failure = script.shift();
    if (failure === "hang") {
      await new Promise((_resolve, reject) => {
        ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason), { once: true });
      });
    } else if (failure !== undefined) {
      throw failure;
    }
  };

  const transport = createRouterTransport(({ service }) => {
    service(OnboardingService, {
      async generateKeys(req, ctx) {
        await enter("generateKeys", req, ctx);
        return { keyId: "key-1", publicKey: "spki", privateKey: "pkcs8", algorithm: "RSA-OAEP-256" };
      },
      async register(req, ctx) {
        await enter("register", req, ctx);
        return { userId: "usr_1", keyId: req.keyId, status: "active", releasedReceipts: 2 };
      },
    });
    service(KeysService, {
      async grantAccess(req, ctx) {
        await enter("grantAccess", req, ctx);
        return { tokenId: "tok_1", userId: req.userId, keyId: req.keyId, purpose: "decrypt" };
      },
    });
    service(ReceiptsService, {
      async encryptReceipt(req, ctx) {
        await enter("encryptReceipt", req, ctx);
        return { receipt: encryptedReceipt(req.receipt?.receiptId ?? "") };
      },
      async decryptReceipt(req, ctx) {
        await enter("decryptReceipt", req, ctx);
        return { receipt: decrypted(req.receiptId) };
      },
      async listReceipts(req, ctx) {
        await enter("listReceipts", req, ctx);
        return listReceipts(req);
      },
      async getTransactionReceipt(req, ctx) {
        await enter("getTransactionReceipt", req, ctx);
        return { receipt: encryptedReceipt(`for-${req.transactionId}`) };
      },
    });
    service(PaymentsService, {
      async createPayment(req, ctx) {
        await enter("createPayment", req, ctx);
        return {
          paymentId: `pay_${calls.length}`,
          gateway: req.gateway,
          status: "succeeded",
          amount: req.receipt?.amount ?? 0n,
          currency: req.receipt?.currency ?? "",
        };
      },
      async decryptPayment(req, ctx) {
        await enter("decryptPayment", req, ctx);
        return { receipt: decrypted(`of-${req.paymentId}`) };
      },
    });
  });

  return {
    transport,
    calls,
    /** Queues failures for the next calls, in order. */
    fail(...failures: Failure[]): void {
      script.push(...failures);
    },
  };
}

/** A scripted server's handle. */
export type ScriptedServer = ReturnType<typeof scriptedServer>;

/** A client of `server` on a fake clock: `delays` records every requested sleep, which returns at once. */
export function clientOf(server: ScriptedServer, options: Partial<ReceiptsClientOptions> = {}) {
  const delays: number[] = [];
  const client = createReceiptsClient({
    baseUrl: "http://in-memory.invalid",
    apiKey: "rk_dev_client_test",
    sleep: async (ms) => {
      delays.push(ms);
    },
    transportOverride: server.transport,
    ...options,
  });
  return { client, delays };
}

/** The settled rejection of a promise, failing the test if it resolved. */
export async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error("expected the call to fail, but it succeeded");
}
