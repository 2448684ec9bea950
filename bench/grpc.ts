import { type ClientHttp2Session, connect, constants } from "node:http2";
import {
  create,
  type DescMessage,
  fromJson,
  type JsonObject,
  type MessageInitShape,
  toBinary,
} from "@bufbuild/protobuf";
import { CreatePaymentRequestSchema, DecryptPaymentRequestSchema } from "../gen/receipts/v1/payments_pb.js";
import { type Receipt, ReceiptSchema } from "../gen/receipts/v1/receipt_pb.js";
import { EncryptReceiptRequestSchema } from "../gen/receipts/v1/receipts_pb.js";
import { type Cardholder, nextId, receiptJson, sizedReceiptText } from "./fixtures.js";

/**
 * The gRPC load generator: unary calls over one HTTP/2 cleartext session per target (as a gRPC channel
 * does), with the request messages encoded by the generated schemas and framed by hand. A generated
 * Connect client did the same job at several times the CPU per call, and on a two-core machine the
 * load generator's CPU is taken from the server it measures; this keeps the client cheap and the same
 * for the service and the baseline. A call succeeds when the response trailers say `grpc-status: 0`.
 */

/** One gRPC target (service or baseline) with the calls the benchmark makes. */
export interface GrpcTarget {
  /** Encrypts a fresh receipt for the next cardholder. */
  encrypt(): Promise<unknown>;
  /** Creates a gateway_a payment with a fresh receipt for the next cardholder. */
  createPayment(): Promise<unknown>;
  /** Decrypts the payment of the next cardholder with its grant and private key. */
  decrypt(): Promise<unknown>;
  /** Closes the HTTP/2 session. */
  close(): void;
}

/** A failed call, with the gRPC status code (or `transport`) for the report. */
class GrpcCallError extends Error {
  constructor(readonly code: string) {
    super(`gRPC call failed: ${code}`);
  }
}

/** The gRPC request body of a fresh receipt: `receiptJson` decoded, so both surfaces send the same receipt. */
function receiptMessage(recipientHashedPan: string, amount?: number): Receipt {
  return fromJson(ReceiptSchema, receiptJson(recipientHashedPan, amount) as JsonObject);
}

/** Makes the receipt of a call: for a recipient, and with `amount` for a payment. */
export type ReceiptMaker = (recipientHashedPan: string, amount?: number) => Receipt;

/**
 * Receipts of `itemCount` line items (`sizedReceiptText` decoded), the same ones the REST loads send.
 * The items are decoded once and shared; each call gets fresh ids and its recipient.
 */
export function sizedReceipts(itemCount: number): ReceiptMaker {
  const template = fromJson(
    ReceiptSchema,
    JSON.parse(sizedReceiptText("0".repeat(64), itemCount)) as JsonObject,
  );
  return (recipientHashedPan, amount) => {
    const id = nextId();
    return create(ReceiptSchema, {
      ...template,
      receiptId: `r-${id}`,
      transactionId: `t-${id}`,
      recipientHashedPan,
      ...(amount === undefined ? {} : { amount: BigInt(amount) }),
    });
  };
}

/** A length-prefixed gRPC message (uncompressed). */
function frame<Desc extends DescMessage>(schema: Desc, init: MessageInitShape<Desc>): Buffer {
  const bytes = toBinary(schema, create(schema, init));
  const framed = Buffer.alloc(5 + bytes.length);
  framed.writeUInt32BE(bytes.length, 1);
  framed.set(bytes, 5);
  return framed;
}

/** One unary call on `session`; resolves with the response bytes when the status is OK. */
function unary(session: ClientHttp2Session, path: string, apiKey: string, body: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc+proto",
      te: "trailers",
      "x-api-key": apiKey,
    });
    const chunks: Buffer[] = [];
    let status: string | undefined;
    stream.setTimeout(30_000, () => stream.close(constants.NGHTTP2_CANCEL));
    stream.on("response", (headers) => {
      const s = headers["grpc-status"];
      if (s !== undefined) status = String(s);
    });
    stream.on("trailers", (trailers) => {
      status = String(trailers["grpc-status"] ?? "");
    });
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("error", () => {
      status ??= "transport";
    });
    stream.on("close", () => {
      if (status === "0") resolve(Buffer.concat(chunks));
      else reject(new GrpcCallError(status === undefined ? "transport" : `grpc ${status}`));
    });
    stream.end(body);
  });
}

/**
 * A gRPC target at `baseUrl`. `decryptCredentials()` gives the payment id, token and private key of
 * the next cardholder to decrypt for (the baseline ignores the token).
 */
export function grpcTarget(
  baseUrl: string,
  apiKeys: { issuer: string; merchant: string },
  cardholders: readonly Cardholder[],
  decryptCredentials: () => { paymentId: string; tokenId: string; privateKey: string },
  makeReceipt: ReceiptMaker = receiptMessage,
): GrpcTarget {
  let session: ClientHttp2Session | undefined;
  const open = () => {
    if (session === undefined || session.closed || session.destroyed) {
      session = connect(baseUrl);
      session.on("error", () => undefined);
      session.unref();
    }
    return session;
  };
  let n = 0;
  const nextHolder = () => cardholders[n++ % cardholders.length] as Cardholder;
  return {
    encrypt() {
      const body = frame(EncryptReceiptRequestSchema, { receipt: makeReceipt(nextHolder().hashedPan) });
      return unary(open(), "/receipts.v1.ReceiptsService/EncryptReceipt", apiKeys.merchant, body);
    },
    createPayment() {
      const body = frame(CreatePaymentRequestSchema, {
        gateway: "gateway_a",
        receipt: makeReceipt(nextHolder().hashedPan, 950),
      });
      return unary(open(), "/receipts.v1.PaymentsService/CreatePayment", apiKeys.merchant, body);
    },
    decrypt() {
      const body = frame(DecryptPaymentRequestSchema, decryptCredentials());
      return unary(open(), "/receipts.v1.PaymentsService/DecryptPayment", apiKeys.issuer, body);
    },
    close() {
      session?.close();
    },
  };
}
