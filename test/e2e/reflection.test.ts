import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { GrpcReflection } from "grpc-js-reflection-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { ServerReflectionRequestSchema } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { loadConfig } from "../../src/config.js";
import { API_SERVICES as SERVICES } from "../../src/rpc/policy.js";
import { reflectionAnswerer } from "../../src/rpc/reflection.js";
import { startService, type TestService } from "../support/harness.js";

const run = promisify(execFile);
const buf = join(import.meta.dirname, "..", "..", "node_modules", ".bin", "buf");

/** `buf curl` with no --schema: it learns the schema through the server's reflection service. */
async function bufCurl(...args: string[]): Promise<string> {
  const { stdout } = await run(buf, ["curl", "--http2-prior-knowledge", ...args], { timeout: 60_000 });
  return stdout;
}

describe("gRPC server reflection", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(() => svc.close());

  it("lets buf curl list every method with no proto at hand, over v1 and v1alpha", async () => {
    for (const protocol of ["grpc-v1", "grpc-v1alpha"]) {
      const listed = (await bufCurl("--list-methods", "--reflect-protocol", protocol, svc.baseUrl)).split(
        "\n",
      );
      for (const method of [
        "receipts.v1.OnboardingService/GenerateKeys",
        "receipts.v1.OnboardingService/Register",
        "receipts.v1.KeysService/GrantAccess",
        "receipts.v1.ReceiptsService/EncryptReceipt",
        "receipts.v1.PaymentsService/CreatePayment",
        "grpc.health.v1.Health/Check",
        "grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
      ]) {
        expect(listed, `${protocol}: ${method}`).toContain(method);
      }
    }
  });

  it("lets buf curl call a real method from the reflected schema (JSON in, JSON out)", async () => {
    const out = await bufCurl(
      "-H",
      `x-api-key: ${svc.issuerKey}`,
      "-d",
      "{}",
      `${svc.baseUrl}/receipts.v1.OnboardingService/GenerateKeys`,
    );
    const keys = JSON.parse(out) as { keyId: string; publicKey: string; algorithm: string };
    expect(keys.keyId).toMatch(/^[0-9a-f-]{36}$/);
    expect(keys.algorithm).toBe("RSA-OAEP-256");
    expect(keys.publicKey.length).toBeGreaterThan(300);
  });

  it("serves a grpc-js reflection client, which builds a working stub from it", async () => {
    const target = `127.0.0.1:${svc.port}`;
    const reflection = new GrpcReflection(target, grpc.credentials.createInsecure());
    const services = await reflection.listServices();
    expect(services).toEqual(
      expect.arrayContaining([
        ...SERVICES.map((s) => s.typeName),
        Health.typeName,
        "grpc.reflection.v1.ServerReflection",
      ]),
    );
    const methods = (await reflection.listMethods("receipts.v1.KeysService")).map((m) => m.name);
    expect(methods).toContain("GrantAccess");

    const descriptor = await reflection.getDescriptorBySymbol("receipts.v1.OnboardingService");
    // biome-ignore lint/suspicious/noExplicitAny: a package object built at run time from the reflected schema
    const pkg = descriptor.getPackageObject({ keepCase: true, longs: String, enums: String }) as any;
    const client = new pkg.receipts.v1.OnboardingService(target, grpc.credentials.createInsecure());
    const metadata = new grpc.Metadata();
    metadata.set("x-api-key", svc.issuerKey);
    type Keys = { key_id: string; private_key: string };
    const keys = await new Promise<Keys>((resolve, reject) =>
      client.GenerateKeys({}, metadata, (err: Error | null, res: Keys) => (err ? reject(err) : resolve(res))),
    );
    client.close();
    expect(keys.key_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(keys.private_key.length).toBeGreaterThan(1000);
  });
});

describe("GRPC_REFLECTION=off", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService({ env: { GRPC_REFLECTION: "off" } });
  });
  afterAll(() => svc.close());

  it("hides the schema: a reflection client gets UNIMPLEMENTED", async () => {
    await expect(bufCurl("--list-methods", svc.baseUrl)).rejects.toThrow(/unimplemented/i);
  });

  it("is on by default and takes only on or off", () => {
    expect(loadConfig({}).grpcReflection).toBe(true);
    expect(loadConfig({ GRPC_REFLECTION: "off" }).grpcReflection).toBe(false);
    expect(() => loadConfig({ GRPC_REFLECTION: "no" })).toThrow(/GRPC_REFLECTION must be one of on, off/);
  });
});

describe("reflection answers", () => {
  const answer = reflectionAnswerer([...SERVICES, Health]);
  const ask = (messageRequest: Parameters<typeof create<typeof ServerReflectionRequestSchema>>[1]) =>
    answer(create(ServerReflectionRequestSchema, messageRequest));

  it("gives the file declaring a method, a field or a message, with every file it imports", () => {
    for (const symbol of [
      "receipts.v1.PaymentsService.CreatePayment",
      "receipts.v1.Receipt.merchant_name",
      "receipts.v1.Receipt",
    ]) {
      const res = ask({ messageRequest: { case: "fileContainingSymbol", value: symbol } });
      expect(res.messageResponse.case, symbol).toBe("fileDescriptorResponse");
    }
    const res = ask({ messageRequest: { case: "fileByFilename", value: "receipts/v1/payments.proto" } });
    expect(res.messageResponse.case).toBe("fileDescriptorResponse");
    const files =
      res.messageResponse.case === "fileDescriptorResponse"
        ? res.messageResponse.value.fileDescriptorProto
        : [];
    const text = files.map((bytes) => new TextDecoder().decode(bytes)).join("\n");
    expect(text).toContain("receipts/v1/payments.proto");
    expect(text).toContain("google/api/annotations.proto");
    expect(text).toContain("google/protobuf/descriptor.proto");
  });

  it("answers NOT_FOUND for an unknown symbol or file, and names the extension numbers of a type", () => {
    for (const messageRequest of [
      { case: "fileContainingSymbol", value: "receipts.v1.Nope" },
      { case: "fileByFilename", value: "nope.proto" },
    ] as const) {
      const res = ask({ messageRequest });
      expect(res.messageResponse.case).toBe("errorResponse");
      if (res.messageResponse.case === "errorResponse") {
        expect(res.messageResponse.value.errorCode).toBe(Code.NotFound);
      }
    }
    const ext = ask({
      messageRequest: { case: "allExtensionNumbersOfType", value: "google.protobuf.MethodOptions" },
    });
    expect(ext.messageResponse.case).toBe("allExtensionNumbersResponse");
    if (ext.messageResponse.case === "allExtensionNumbersResponse") {
      expect(ext.messageResponse.value.extensionNumber).toContain(72295728); // google.api.http
    }
  });
});
