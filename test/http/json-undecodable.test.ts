import { fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { startService, type TestService } from "../support/harness.js";

/**
 * A Connect, gRPC-JSON or gRPC-Web-JSON request whose JSON the protobuf decoder refuses (not JSON, or
 * a value of the wrong type) is the caller's `invalid_request`, with the service's ErrorInfo (reason,
 * domain `receipts.v1`) and BadRequest as every other error of these surfaces.
 * Before, connect-es's own INVALID_ARGUMENT went out without them: a client reading the reason found none.
 * The same holds for a body over the limit (`payload_too_large`, RESOURCE_EXHAUSTED): without the
 * reason, Connect's HTTP 429 for it read as a rate limit, and the client library retried it.
 */

const PATH = "/receipts.v1.ReceiptsService/EncryptReceipt";

/** The cases: a body that is not JSON, a number that is not one, an object where a list goes. */
const BODIES: ReadonlyArray<readonly [string, string]> = [
  ["not JSON", "{nope"],
  ["a string for an int64", '{"receipt":{"amount":"abc"}}'],
  ["an object for a list", '{"receipt":{"items":{}}}'],
  ["a list for the message", "[]"],
];

interface ConnectDetail {
  type: string;
  value: string;
}

/** The ErrorInfo and BadRequest of a Connect error body's details. */
function detailsOf(details: ConnectDetail[] | undefined) {
  const find = (type: string) => details?.find((d) => d.type === type)?.value;
  const bytes = (value: string) => Buffer.from(value, "base64");
  const info = find("google.rpc.ErrorInfo");
  const bad = find("google.rpc.BadRequest");
  return {
    info: info === undefined ? undefined : fromBinary(ErrorInfoSchema, bytes(info)),
    bad: bad === undefined ? undefined : fromBinary(BadRequestSchema, bytes(bad)),
  };
}

describe("JSON that the protobuf decoder refuses, over Connect and gRPC-Web", () => {
  let svc: TestService;

  beforeAll(async () => {
    svc = await startService();
  });

  afterAll(async () => {
    await svc.close();
  });

  it("answers Connect with invalid_argument carrying the service's ErrorInfo, BadRequest and request id", async () => {
    for (const [label, body] of BODIES) {
      const res = await fetch(`${svc.baseUrl}${PATH}`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": svc.merchantKey },
        body,
      });
      const error = (await res.json()) as { code: string; message: string; details?: ConnectDetail[] };
      expect(res.status, label).toBe(400);
      expect(error.code, label).toBe("invalid_argument");
      const { info, bad } = detailsOf(error.details);
      expect(info?.reason, label).toBe("invalid_request");
      expect(info?.domain, label).toBe("receipts.v1");
      expect(bad?.fieldViolations[0]?.field, label).toBe("body");
      expect(bad?.fieldViolations[0]?.description, label).toMatch(/^cannot decode (message|field) /);
      expect(res.headers.get("x-request-id"), label).toMatch(/\S/);
    }
  });

  it("answers gRPC-Web JSON with status 3 and the service's ErrorInfo in the trailer frame", async () => {
    const payload = Buffer.from("{nope");
    const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, payload.length]), payload]);
    const res = await fetch(`${svc.baseUrl}${PATH}`, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+json", "x-api-key": svc.merchantKey },
      body: frame,
    });
    const text = Buffer.from(await res.arrayBuffer()).toString("latin1");
    expect(res.status).toBe(200);
    expect(text).toMatch(/grpc-status: ?3\r\n/);
    const details = /grpc-status-details-bin: ?([A-Za-z0-9+/=]+)/.exec(text)?.[1] ?? "";
    expect(Buffer.from(details, "base64").toString("latin1")).toContain("invalid_request");
  });

  it("answers a body over the limit with payload_too_large on Connect, gRPC-Web and gRPC", async () => {
    const body = JSON.stringify({ receipt: { merchantName: "x".repeat(1_100_000) } });
    const res = await fetch(`${svc.baseUrl}${PATH}`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": svc.merchantKey },
      body,
    });
    const error = (await res.json()) as { code: string; message: string; details?: ConnectDetail[] };
    expect(error.code).toBe("resource_exhausted");
    expect(error.message).toBe("The body is larger than 1048576 bytes.");
    expect(detailsOf(error.details).info?.reason).toBe("payload_too_large");

    const payload = Buffer.from(body);
    const header = Buffer.from([0, 0, 0, 0, 0]);
    header.writeUInt32BE(payload.length, 1);
    const web = await fetch(`${svc.baseUrl}${PATH}`, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+json", "x-api-key": svc.merchantKey },
      body: Buffer.concat([header, payload]),
    });
    const text = Buffer.from(await web.arrayBuffer()).toString("latin1");
    expect(text).toMatch(/grpc-status: ?8\r\n/);
    const details = /grpc-status-details-bin: ?([A-Za-z0-9+/=]+)/.exec(text)?.[1] ?? "";
    expect(Buffer.from(details, "base64").toString("latin1")).toContain("payload_too_large");

    // gRPC, both codecs (protobuf binary takes the service's own unary path).
    for (const useBinaryFormat of [true, false]) {
      const grpc = createClient(
        ReceiptsService,
        createGrpcTransport({ baseUrl: svc.baseUrl, useBinaryFormat }),
      );
      const err = await grpc
        .encryptReceipt(
          { receipt: { merchantName: "x".repeat(1_100_000) } },
          { headers: { "x-api-key": svc.merchantKey } },
        )
        .then(
          () => undefined,
          (e: unknown) => ConnectError.from(e),
        );
      expect(err?.code, `binary ${useBinaryFormat}`).toBe(Code.ResourceExhausted);
      expect(err?.findDetails(ErrorInfoSchema)[0]?.reason, `binary ${useBinaryFormat}`).toBe(
        "payload_too_large",
      );
    }
  });
});
