import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { gzipSync } from "node:zlib";
import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GenerateKeysResponseSchema } from "../../gen/receipts/v1/onboarding_pb.js";
import { createReceiptsClient } from "../../src/client/index.js";

/**
 * The client's default transport, the Connect protocol over `fetch`: fetch decodes a compressed
 * response by itself (and browsers ask for gzip whatever the page says), so the transport must not
 * hand Connect a `Content-Encoding` it never asked for. Chromium found it; this keeps it found.
 */
describe("the fetch transport", () => {
  let baseUrl: string;
  const seen: { accept?: string | undefined; type?: string | undefined } = {};
  const server = createServer((req, res) => {
    seen.accept = req.headers["accept-encoding"];
    seen.type = req.headers["content-type"];
    req.resume().on("end", () => {
      const body = toBinary(GenerateKeysResponseSchema, create(GenerateKeysResponseSchema, { keyId: "k-1" }));
      res.writeHead(200, { "content-type": "application/proto", "content-encoding": "gzip" });
      res.end(gzipSync(body));
    });
  });
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it("reads a gzip-encoded answer that fetch has already decoded", async () => {
    const client = createReceiptsClient({ baseUrl, apiKey: "rk_dev_x" });
    expect((await client.generateKeys()).keyId).toBe("k-1");
    // Binary Connect, and the compression fetch asked for by itself.
    expect(seen.type).toBe("application/proto");
    expect(seen.accept).toContain("gzip");
  });
});
