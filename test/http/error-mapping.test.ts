import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { AppError, ERRORS, type ErrorCode } from "../../src/errors.js";
import { kLogger } from "../../src/rpc/context.js";
import { errorCodeOf, errorInterceptor, toConnectError, toRestError } from "../../src/rpc/error-mapping.js";

describe("toConnectError", () => {
  it("maps every registry code to its gRPC code and HTTP status", () => {
    for (const code of Object.keys(ERRORS) as ErrorCode[]) {
      const connectError = toConnectError(new AppError(code, "m"), "rid");
      expect(connectError.code, code).toBe(ERRORS[code].grpc);
      expect(connectError.findDetails(ErrorInfoSchema)[0]).toMatchObject({
        reason: code,
        domain: "receipts.v1",
      });
      expect(toRestError(connectError).status, code).toBe(ERRORS[code].http);
    }
  });

  it("carries message, violations, retry-after, headers and the request id", () => {
    const err = new AppError("rate_limit_exceeded", "Slow down.", {
      violations: [{ field: "a", description: "b" }],
      retryAfterSeconds: 2.2,
      headers: { "x-ratelimit-limit": "60" },
    });
    const connectError = toConnectError(err, "rid-1");
    expect(connectError.rawMessage).toBe("Slow down.");
    expect(connectError.code).toBe(Code.ResourceExhausted);
    expect(connectError.findDetails(BadRequestSchema)[0]?.fieldViolations[0]).toMatchObject({
      field: "a",
      description: "b",
    });
    expect(Object.fromEntries(connectError.metadata)).toEqual({
      "x-request-id": "rid-1",
      "retry-after": "3",
      "x-ratelimit-limit": "60",
    });
  });

  it("turns anything else into a generic internal error, keeping the cause for logs only", () => {
    const cause = new Error("password=hunter2");
    for (const err of [cause, new ConnectError("upstream said no", Code.NotFound), "a string"]) {
      const connectError = toConnectError(err, "rid");
      expect(connectError.code).toBe(Code.Internal);
      expect(connectError.rawMessage).toBe("Internal server error.");
      expect(errorCodeOf(connectError)).toBe("internal_server_error");
    }
    expect(toConnectError(cause, "rid").cause).toBe(cause);
  });

  it("keeps an error that is already mapped", () => {
    const mapped = toConnectError(new AppError("conflict", "Duplicate."), "rid");
    expect(toConnectError(mapped, "other")).toBe(mapped);
  });
});

describe("toRestError", () => {
  it("builds the envelope with details joined and the request id of the call", () => {
    const now = new Date("2026-01-01T00:00:00Z");
    const err = new AppError("invalid_request", "Bad.", {
      violations: [
        { field: "recipientHashedPan", description: "must be 64 hexadecimal characters" },
        { field: "currency", description: "must be an ISO 4217 code" },
      ],
    });
    expect(toRestError(err, "rid-2", now)).toEqual({
      status: 400,
      body: {
        success: false,
        error: {
          code: "invalid_request",
          message: "Bad.",
          details:
            "recipientHashedPan: must be 64 hexadecimal characters; currency: must be an ISO 4217 code",
          timestamp: "2026-01-01T00:00:00.000Z",
          request_id: "rid-2",
          doc_url: "/docs/errors#invalid_request",
        },
      },
      headers: { "x-request-id": "rid-2" },
    });
  });

  it("adds an error's metadata to the envelope and its details, never over the envelope's own members", () => {
    const now = new Date("2026-01-01T00:00:00Z");
    const err = new AppError("payment_declined", "Declined.", {
      metadata: { decline_code: "expired_card", code: "x", request_id: "x", doc_url: "https://evil.example" },
    });
    const { error } = toRestError(err, "rid-3", now).body;
    expect(error).toEqual({
      code: "payment_declined",
      message: "Declined.",
      details: "decline_code: expired_card",
      timestamp: "2026-01-01T00:00:00.000Z",
      request_id: "rid-3",
      decline_code: "expired_card",
      doc_url: "/docs/errors#payment_declined",
    });
    const info = toConnectError(err, "rid-3").findDetails(ErrorInfoSchema)[0];
    expect(info?.metadata.doc_url).toBe("/docs/errors#payment_declined");
    expect(info?.metadata.decline_code).toBe("expired_card");
  });
});

describe("errorInterceptor", () => {
  it("maps handler errors and logs the cause of a 5xx through the request logger", async () => {
    const lines: string[] = [];
    const logger = pino({ level: "info" }, { write: (line: string) => lines.push(line) });
    const transport = createRouterTransport(
      (router) =>
        router.service(ReceiptsService, {
          getTransactionReceipt(req) {
            if (req.transactionId === "gone") throw new AppError("not_found", "No such receipt.");
            throw new Error("driver: socket hang up at 10.0.0.7");
          },
        }),
      {
        router: {
          interceptors: [
            (next) => (req) => {
              req.contextValues.set(kLogger, () => logger);
              return next(req);
            },
            errorInterceptor,
          ],
        },
      },
    );
    const client = createClient(ReceiptsService, transport);
    const internal = await client.getTransactionReceipt({ transactionId: "x" }).catch((e: unknown) => e);
    expect(internal).toBeInstanceOf(ConnectError);
    expect((internal as ConnectError).rawMessage).toBe("Internal server error.");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain("socket hang up");
    expect(JSON.parse(lines[0] ?? "{}")).toMatchObject({
      level: 50,
      code: "internal_server_error",
      procedure: "receipts.v1.ReceiptsService/GetTransactionReceipt",
    });

    const notFound = await client.getTransactionReceipt({ transactionId: "gone" }).catch((e: unknown) => e);
    expect((notFound as ConnectError).code).toBe(Code.NotFound);
    expect(lines).toHaveLength(1);
  });
});
