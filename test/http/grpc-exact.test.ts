import { status } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GrantAccessRequestSchema } from "../../gen/receipts/v1/keys_pb.js";
import { grpcRaw, rawGrpcClient } from "../hardening/support.js";
import { startService, type TestService } from "../support/harness.js";
import { frame, framed, rawGrpc } from "./grpc-raw.js";

/**
 * What a gRPC, gRPC-Web or Connect client gets at the edges of the protocol: an unknown method is
 * UNIMPLEMENTED in the caller's protocol (not the REST 404 envelope), with the request id and the
 * rate-limit metadata every RPC answer carries; `grpc-message` is encoded as the gRPC spec says, so
 * grpc-js users read the message as written.
 */

describe("gRPC, gRPC-Web and Connect edges", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it("answers an unknown method or service UNIMPLEMENTED to a grpc-js client, with request id and rate limits", async () => {
    const client = rawGrpcClient(svc.port);
    try {
      for (const path of ["/receipts.v1.ReceiptsService/Nope", "/nope.v1.NopeService/Call"]) {
        const outcome = await grpcRaw(client, path, new Uint8Array(), {
          "x-api-key": svc.issuerKey,
          "x-request-id": "unknown-method-1",
        });
        expect(outcome.code, path).toBe(status.UNIMPLEMENTED);
        expect(outcome.details, path).toContain(path);
        expect(outcome.metadata?.get("x-request-id"), path).toEqual(["unknown-method-1"]);
        expect(outcome.metadata?.get("x-ratelimit-limit"), path).toEqual(["1200"]);
        expect(outcome.metadata?.get("x-ratelimit-remaining")[0], path).toMatch(/^\d+$/);
        expect(outcome.metadata?.get("x-ratelimit-reset")[0], path).toMatch(/^\d+$/);
      }
    } finally {
      client.close();
    }
  });

  it("answers an unknown method trailers-only on HTTP 200 on the wire, never the REST 404", async () => {
    const answer = await rawGrpc(
      svc.baseUrl,
      "/receipts.v1.ReceiptsService/Nope",
      framed(GrantAccessRequestSchema, {}),
    );
    expect(answer.headers[":status"]).toBe("200");
    expect(answer.headers["grpc-status"]).toBe(String(status.UNIMPLEMENTED));
    expect(answer.headers["content-type"]).toMatch(/^application\/grpc/);
    expect(answer.headers["x-request-id"]).toMatch(/\S/);
    expect(answer.headers["x-ratelimit-limit"]).toBe("60");
    expect(answer.body.length).toBe(0);
  });

  it("answers unknown methods in gRPC-Web and Connect in their own protocol", async () => {
    const web = await fetch(`${svc.baseUrl}/receipts.v1.ReceiptsService/Nope`, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+proto", "x-grpc-web": "1" },
      body: frame(new Uint8Array()),
    });
    expect(web.status).toBe(200);
    expect(web.headers.get("grpc-status")).toBe(String(status.UNIMPLEMENTED));
    expect(web.headers.get("x-request-id")).toMatch(/\S/);
    expect(web.headers.get("x-ratelimit-limit")).toBe("60");

    const connect = await fetch(`${svc.baseUrl}/receipts.v1.ReceiptsService/Nope`, {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1" },
      body: "{}",
    });
    expect(connect.status).toBe(404);
    expect(await connect.json()).toMatchObject({ code: "unimplemented" });
    expect(connect.headers.get("x-request-id")).toMatch(/\S/);
    expect(connect.headers.get("x-ratelimit-limit")).toBe("60");
  });

  it("sends grpc-message encoded as the gRPC spec says: grpc-js reads 'Missing API key: send it...'", async () => {
    const client = rawGrpcClient(svc.port);
    try {
      const body = framed(GrantAccessRequestSchema, { userId: "u1", keyId: "k1" }).subarray(5);
      const outcome = await grpcRaw(client, "/receipts.v1.KeysService/GrantAccess", body, {});
      expect(outcome.code).toBe(status.UNAUTHENTICATED);
      expect(outcome.details).toBe("Missing API key: send it in the X-API-Key header.");
    } finally {
      client.close();
    }
    const raw = await rawGrpc(
      svc.baseUrl,
      "/receipts.v1.KeysService/GrantAccess",
      framed(GrantAccessRequestSchema, {}),
    );
    expect(raw.trailers["grpc-message"]).toBe("Missing API key: send it in the X-API-Key header.");
  });

  it("encodes grpc-message the same way on the Connect path (gRPC-JSON, compressed calls)", async () => {
    const raw = await rawGrpc(
      svc.baseUrl,
      "/receipts.v1.KeysService/GrantAccess",
      frame(Buffer.from('{"userId":"u1"}')),
      { "content-type": "application/grpc+json" },
    );
    // gRPC-JSON is served by the Connect plugin: the same message, encoded the same way.
    expect(raw.trailers["grpc-status"]).toBe(String(status.UNAUTHENTICATED));
    expect(raw.trailers["grpc-message"]).toBe("Missing API key: send it in the X-API-Key header.");
  });

  it("refuses a message flagged compressed without grpc-encoding as INTERNAL, as the gRPC spec requires", async () => {
    // doc/compression.md, test case 6: "An ill-constructed message with its Compressed-Flag bit set
    // but lacking a grpc-encoding entry different from identity in its metadata MUST fail with
    // INTERNAL status". The answer names the condition.
    const body = framed(GrantAccessRequestSchema, { userId: "u1" });
    const answer = await rawGrpc(
      svc.baseUrl,
      "/receipts.v1.KeysService/GrantAccess",
      frame(body.subarray(5), 1),
      {
        "x-api-key": svc.issuerKey,
      },
    );
    expect(answer.trailers["grpc-status"]).toBe(String(status.INTERNAL));
    expect(answer.trailers["grpc-message"]).toMatch(/compress/);
    expect(answer.headers["x-request-id"]).toMatch(/\S/);
  });
});
