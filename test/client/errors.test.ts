import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { codeFromConnectCode, ReceiptsApiError } from "../../src/client/index.js";
import { bareError, clientOf, rejectionOf, scriptedServer, serviceError } from "./support.js";

/** A failed call surfaces as a ReceiptsApiError a caller can act on without parsing messages. */
describe("ReceiptsApiError", () => {
  it("carries the service code, message, request id and every field violation", async () => {
    const server = scriptedServer();
    const violations = [
      { field: "recipientHashedPan", description: "must be 64 hexadecimal characters" },
      { field: "currency", description: "must be an ISO 4217 code" },
    ];
    server.fail(serviceError("invalid_request", Code.InvalidArgument, { requestId: "req-42", violations }));
    const { client } = clientOf(server);

    const err = await rejectionOf(client.encryptReceipt({ receiptId: "r-1" }));

    expect(err).toBeInstanceOf(ReceiptsApiError);
    expect(err).toBeInstanceOf(Error);
    expect(err).toMatchObject({
      name: "ReceiptsApiError",
      code: "invalid_request",
      connectCode: Code.InvalidArgument,
      message: "invalid_request on purpose",
      requestId: "req-42",
      violations,
      attempts: 1,
      retryAfterSeconds: undefined,
    });
    expect((err as ReceiptsApiError).cause).toBeInstanceOf(ConnectError);
  });

  it("carries the error's facts: doc_url made absolute, decline_code, payment_id", async () => {
    const server = scriptedServer();
    const facts = { doc_url: "/docs/errors#payment_declined", decline_code: "insufficient_funds" };
    server.fail(serviceError("payment_declined", Code.FailedPrecondition, { facts }));
    server.fail(
      serviceError("conflict", Code.AlreadyExists, {
        facts: { doc_url: "/docs/errors#conflict", payment_id: "pay_1" },
      }),
    );
    const { client } = clientOf(server, { baseUrl: "https://receipts.example.com/base/" });

    const declined = await rejectionOf(client.createPayment("gateway_b", { receiptId: "r-1" }));
    expect(declined).toMatchObject({
      code: "payment_declined",
      docUrl: "https://receipts.example.com/docs/errors#payment_declined",
      declineCode: "insufficient_funds",
      paymentId: undefined,
      facts: { ...facts, doc_url: "https://receipts.example.com/docs/errors#payment_declined" },
    });
    const twice = await rejectionOf(client.createPayment("gateway_a", { receiptId: "r-1" }));
    expect(twice).toMatchObject({ code: "conflict", paymentId: "pay_1", declineCode: undefined });
  });

  it("never offers a doc_url that is not a web link (a hostile answer's javascript: URL)", async () => {
    const server = scriptedServer();
    for (const link of ["javascript:alert(1)", "data:text/html,x", "//evil.example/x"]) {
      server.fail(serviceError("forbidden", Code.PermissionDenied, { facts: { doc_url: link } }));
    }
    const { client } = clientOf(server, { baseUrl: "not a url" });
    for (let i = 0; i < 3; i++) {
      const err = (await rejectionOf(client.generateKeys())) as ReceiptsApiError;
      expect(err.docUrl, err.facts.doc_url).toBeUndefined();
    }
  });

  it("has no doc_url when no service answered", async () => {
    const server = scriptedServer();
    server.fail(bareError(Code.PermissionDenied, "proxy says no"));
    const { client } = clientOf(server);
    expect(await rejectionOf(client.generateKeys())).toMatchObject({ docUrl: undefined, facts: {} });
  });

  it("carries Retry-After seconds when the rate limit outlasts the attempts", async () => {
    const server = scriptedServer();
    const limited = () => serviceError("rate_limit_exceeded", Code.ResourceExhausted, { retryAfter: "2" });
    server.fail(limited(), limited(), limited());
    const { client, delays } = clientOf(server);

    const err = await rejectionOf(client.grantAccess({ userId: "usr_1", keyId: "key-1" }));

    expect(err).toMatchObject({ code: "rate_limit_exceeded", retryAfterSeconds: 2, attempts: 3 });
    expect(delays).toEqual([2000, 2000]);
  });

  it("falls back to a code derived from the Connect status when there is no ErrorInfo", async () => {
    const server = scriptedServer();
    server.fail(bareError(Code.PermissionDenied, "proxy says no"));
    const { client } = clientOf(server);

    const err = await rejectionOf(client.generateKeys());

    expect(err).toMatchObject({
      code: "forbidden",
      message: "proxy says no",
      requestId: undefined,
      violations: [],
    });
  });

  it("ignores an ErrorInfo from another domain", async () => {
    const server = scriptedServer();
    server.fail(
      new ConnectError("upstream", Code.NotFound, undefined, [
        { desc: ErrorInfoSchema, value: { reason: "SERVICE_DISABLED", domain: "googleapis.com" } },
      ]),
    );
    const { client } = clientOf(server);

    expect(await rejectionOf(client.generateKeys())).toMatchObject({ code: "not_found" });
  });

  it("maps every Connect code to a stable string", () => {
    const table = Object.fromEntries(
      Object.values(Code)
        .filter((c): c is Code => typeof c === "number")
        .map((c) => [Code[c], codeFromConnectCode(c)]),
    );
    expect(table).toEqual({
      Canceled: "canceled",
      Unknown: "unknown",
      InvalidArgument: "invalid_request",
      DeadlineExceeded: "deadline_exceeded",
      NotFound: "not_found",
      AlreadyExists: "conflict",
      PermissionDenied: "forbidden",
      ResourceExhausted: "resource_exhausted",
      FailedPrecondition: "failed_precondition",
      Aborted: "aborted",
      OutOfRange: "out_of_range",
      Unimplemented: "unimplemented",
      Internal: "internal_server_error",
      Unavailable: "service_unavailable",
      DataLoss: "data_loss",
      Unauthenticated: "unauthorized",
    });
  });
});

describe("metadata sent in both headers and trailers (as gRPC merges them)", () => {
  it("reads the first value of x-request-id and retry-after", async () => {
    const server = scriptedServer();
    const twice = () => {
      const err = serviceError("rate_limit_exceeded", Code.ResourceExhausted, {
        requestId: "req-7",
        retryAfter: "3",
      });
      err.metadata.append("x-request-id", "req-7");
      err.metadata.append("retry-after", "3");
      return err;
    };
    server.fail(twice(), twice(), twice());
    const { client, delays } = clientOf(server);

    const err = await rejectionOf(client.grantAccess({ userId: "usr_1", keyId: "key-1" }));

    expect(delays).toEqual([3000, 3000]);
    expect(err).toMatchObject({ requestId: "req-7", retryAfterSeconds: 3 });
  });
});
