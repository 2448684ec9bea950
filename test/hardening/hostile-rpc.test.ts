import { type DescMethod, ScalarType } from "@bufbuild/protobuf";
import { type Client, status } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { rolesFor } from "../../src/rpc/policy.js";
import { hashPan, receiptBody, startService, type TestService } from "../support/harness.js";
import { type Hostile, hostileBodies, hostileValues } from "./cases.js";
import {
  type Answer,
  type Cardholder,
  connectRaw,
  errorLines,
  grpcRaw,
  grpcTyped,
  RPCS,
  rawGrpcClient,
  rpcPath,
  SERVER_FAULTS,
  SIGNING_KEY,
  seedTargets,
  send,
  UNLIMITED_TIERS,
} from "./support.js";

/** Body-level cases a protobuf JSON decoder accepts by design: unknown fields are skipped. */
const TOLERATED_BODIES = new Set([
  "__proto__ key",
  "constructor key",
  "prototype key",
  "unknown field",
  "Mongo operator field",
  "deeply nested arrays",
  "deeply nested objects",
  "huge array",
]);

/** Protobuf wire bytes that no message decodes: truncations, overflows, dangling groups. */
const MALFORMED: ReadonlyArray<readonly [string, number[]]> = [
  ["garbage", [0xff, 0xff, 0xff, 0xff, 0xff, 0xff]],
  ["truncated length-delimited field", [0x0a, 0x64, 0x41, 0x41]],
  ["length beyond the message", [0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]],
  ["varint that never ends", [0x08, ...Array(11).fill(0xff)]],
  ["end group without start", [0x0c]],
  ["start group without end", [0x0b, 0x08, 0x01]],
  ["reserved wire type 7", [0x0f, 0x00]],
  ["field number 0", [0x00, 0x01]],
];

/** A tag and length for string field `no` holding `bytes` (protobuf wire format). */
function stringField(no: number, bytes: number[]): number[] {
  return [(no << 3) | 2, bytes.length, ...bytes];
}

describe("hostile input over gRPC (grpc-js) and Connect: every RPC refuses it with the matching status", () => {
  const logLines: string[] = [];
  let svc: TestService;
  let grpc: Client;
  let holder: Cardholder;
  let tokenId: string;
  let paymentId: string;
  let receiptId: string;
  let transactionId: string;
  let cases = 0;

  beforeAll(async () => {
    // A short grace: an oversize request over Connect or gRPC-Web can leave its stream half-open until
    // shutdown cuts it (binary gRPC answers it and resets the stream).
    svc = await startService({ env: { RATE_LIMIT_TIERS: UNLIMITED_TIERS }, logLines, shutdownGraceMs: 500 });
    grpc = rawGrpcClient(svc.port);
    const targets = await seedTargets(svc);
    ({ holder, paymentId, tokenId } = targets);
    receiptId = targets.receipt.receiptId as string;
    transactionId = targets.receipt.transactionId as string;
  });

  afterAll(async () => {
    console.log(`hardening: ${cases} hostile gRPC and Connect requests refused`);
    grpc.close();
    await svc.close();
  });

  const keyOf = (role: "issuer" | "merchant") => (role === "issuer" ? svc.issuerKey : svc.merchantKey);

  /** A valid request of each RPC, as proto JSON. */
  function validJson(method: DescMethod): Record<string, unknown> {
    switch (method.name) {
      case "GenerateKeys":
        return {};
      case "Register":
        return { hashedPan: hashPan("4000000000000002"), publicKey: holder.publicKey, keyId: holder.keyId };
      case "GrantAccess":
        return { userId: holder.userId, keyId: holder.keyId };
      case "EncryptReceipt":
        return { receipt: receiptBody() };
      case "DecryptReceipt":
        return { receiptId, tokenId, privateKey: holder.privateKey };
      case "ListReceipts":
        return { userId: holder.userId, pageSize: 10 };
      case "GetTransactionReceipt":
        return { transactionId, merchantId: "merchant-001" };
      case "CreatePayment":
        return { gateway: "gateway_a", receipt: { ...receiptBody(), amount: 950 } };
      case "DecryptPayment":
        return { paymentId, tokenId, privateKey: holder.privateKey };
      case "RegisterSigningKey":
        // A merchantId of its own: a key registered here must not make other receipts need signatures.
        return { merchantId: "merchant-signing-rpc", publicKey: SIGNING_KEY };
      default:
        return {};
    }
  }

  async function expectGrpcRefusal(
    method: DescMethod,
    role: "issuer" | "merchant",
    payload: number[] | Uint8Array,
    label: string,
  ): Promise<number> {
    cases += 1;
    const outcome = await grpcRaw(grpc, rpcPath(method), Uint8Array.from(payload), {
      "x-api-key": keyOf(role),
    });
    const where = `${method.name} ${label}: ${status[outcome.code]} ${outcome.details}`;
    expect(outcome.code, where).not.toBe(status.OK);
    expect(SERVER_FAULTS.has(outcome.code), where).toBe(false);
    return outcome.code;
  }

  async function connectCase(method: DescMethod, role: "issuer" | "merchant", body: Hostile | Uint8Array) {
    cases += 1;
    if (body instanceof Uint8Array)
      return connectRaw(svc, method, body, { "x-api-key": keyOf(role) }, "application/proto");
    const text = "raw" in body ? body.raw : JSON.stringify(body.value);
    return connectRaw(svc, method, text, { "x-api-key": keyOf(role) });
  }

  function expectConnectRefusal(answer: Answer, label: string): void {
    expect(answer.status, `${label}: ${answer.text.slice(0, 200)}`).toBeGreaterThanOrEqual(400);
    expect(answer.status, `${label}: ${answer.text.slice(0, 200)}`).toBeLessThan(500);
    expect(typeof (JSON.parse(answer.text) as { code?: unknown }).code, label).toBe("string");
  }

  it("answers INVALID_ARGUMENT, never INTERNAL, to protobuf bytes that do not decode (gRPC)", async () => {
    for (const [method, role] of RPCS) {
      for (const [label, bytes] of MALFORMED) {
        expect(await expectGrpcRefusal(method, role, bytes, label)).toBe(status.INVALID_ARGUMENT);
      }
      for (const field of method.input.fields) {
        if (field.fieldKind !== "scalar" || field.scalar !== ScalarType.STRING) continue;
        const code = await expectGrpcRefusal(
          method,
          role,
          stringField(field.number, [0xc3, 0x28]),
          field.name,
        );
        expect(code, `${method.name}.${field.name}: invalid UTF-8`).toBe(status.INVALID_ARGUMENT);
      }
      const big = await expectGrpcRefusal(method, role, new Uint8Array(1_100_000).fill(0x41), "1.1 MB");
      expect(big).toBe(status.RESOURCE_EXHAUSTED);
    }
  });

  it("refuses well-formed messages with hostile values on every RPC (gRPC)", async () => {
    for (const [method, role] of RPCS) {
      const headers = { "x-api-key": keyOf(role) };
      const strings = method.input.fields.filter(
        (f) => f.fieldKind === "scalar" && f.scalar === ScalarType.STRING,
      );
      for (const value of [
        "x".repeat(900_000),
        '{"$ne":null}',
        "__proto__",
        "\u0000\u001b[2J",
        "../../etc",
      ]) {
        if (strings.length === 0) continue;
        const init = Object.fromEntries(strings.map((f) => [f.localName, value]));
        cases += 1;
        const outcome = await grpcTyped(grpc, method, init, headers);
        expect(outcome.code, `${method.name} ${value.slice(0, 12)}`).not.toBe(status.OK);
        expect(SERVER_FAULTS.has(outcome.code), `${method.name}: ${outcome.details}`).toBe(false);
      }
      const keys: Array<[string, Record<string, string>]> = [
        ["no API key", {}],
        ["unknown API key", { "x-api-key": `rk_dev_${"z".repeat(43)}` }],
      ];
      if (rolesFor(method).length === 1) {
        keys.push(["other role", { "x-api-key": keyOf(role === "issuer" ? "merchant" : "issuer") }]);
      }
      for (const [label, meta] of keys) {
        cases += 1;
        const outcome = await grpcTyped(grpc, method, {}, meta);
        const expected = label === "other role" ? status.PERMISSION_DENIED : status.UNAUTHENTICATED;
        expect(outcome.code, `${method.name}: ${label}`).toBe(expected);
      }
    }
    const base = { ...receiptBody(), transactionDate: { seconds: 1_767_225_600n, nanos: 0 } };
    const receipts: Array<readonly [string, Record<string, unknown>]> = [
      ["negative amount", { ...base, amount: -1n }],
      ["int64 max amount", { ...base, amount: 2n ** 63n - 1n }],
      ["year 5138", { ...base, transactionDate: { seconds: 100_000_000_000n, nanos: 0 } }],
      ["before the epoch", { ...base, transactionDate: { seconds: -100_000_000_000n, nanos: 0 } }],
      ["negative nanos", { ...base, transactionDate: { seconds: 1_767_225_600n, nanos: -1 } }],
      [
        "nanos over a second",
        { ...base, transactionDate: { seconds: 1_767_225_600n, nanos: 2_000_000_000 } },
      ],
      [
        "5,000 items",
        { ...base, items: Array.from({ length: 5_000 }, (_, i) => ({ lineItemId: `${i}`, name: "x" })) },
      ],
      ["quantity 2^62", { ...base, items: [{ lineItemId: "1", name: "x", quantity: 2n ** 62n }] }],
      [
        "NaN tax rate",
        {
          ...base,
          items: [{ lineItemId: "1", name: "x", quantity: 1n, taxes: [{ name: "t", rate: Number.NaN }] }],
        },
      ],
    ];
    for (const [label, receipt] of receipts) {
      for (const [method, init] of [
        [ReceiptsService.method.encryptReceipt, { receipt }],
        [PaymentsService.method.createPayment, { gateway: "gateway_a", receipt }],
      ] as const) {
        cases += 1;
        const outcome = await grpcTyped(grpc, method, init, { "x-api-key": svc.merchantKey });
        expect(outcome.code, `${method.name} ${label}: ${outcome.details}`).toBe(status.INVALID_ARGUMENT);
      }
    }
  });

  // Every RPC times every hostile body and value: about a second per RPC on a quiet machine.
  it("refuses hostile JSON and protobuf bodies on every RPC over Connect, and tolerates only unknown fields", {
    timeout: 90_000,
  }, async () => {
    for (const [method, role] of RPCS) {
      const valid = validJson(method);
      for (const hostile of hostileBodies(JSON.stringify(valid))) {
        const answer = await connectCase(method, role, hostile);
        if (TOLERATED_BODIES.has(hostile.label)) expect(answer.status, hostile.label).toBeLessThan(500);
        else expectConnectRefusal(answer, `${method.name}: ${hostile.label}`);
      }
      for (const [field, value] of Object.entries(valid)) {
        for (const hostile of hostileValues(value)) {
          const marker = "\u0001HOSTILE\u0001";
          const raw = "raw" in hostile ? String(hostile.raw) : JSON.stringify(hostile.value);
          const text = JSON.stringify({ ...valid, [field]: marker }).replace(JSON.stringify(marker), raw);
          const answer = await connectCase(method, role, { label: hostile.label, raw: text });
          const label = `${method.name}.${field}: ${hostile.label}`;
          if (hostile.label === "numeric string") expect(answer.status, label).toBeLessThan(500);
          else expectConnectRefusal(answer, label);
        }
      }
      for (const [label, bytes] of MALFORMED) {
        const answer = await connectCase(method, role, Uint8Array.from(bytes));
        expectConnectRefusal(answer, `${method.name} proto: ${label}`);
        expect((JSON.parse(answer.text) as { code: string }).code).toBe("invalid_argument");
      }
    }
  });

  it("answers INVALID_ARGUMENT to undecodable gRPC-Web requests too, in the trailer frame", async () => {
    for (const [method, role] of RPCS) {
      cases += 1;
      const payload = Uint8Array.from([0xff, 0xff, 0xff]);
      const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, payload.length]), payload]);
      const answer = await send(svc, "POST", rpcPath(method), {
        body: frame,
        headers: { "content-type": "application/grpc-web+proto", "x-api-key": keyOf(role) },
      });
      expect(answer.status).toBe(200);
      expect(answer.text, method.name).toMatch(/grpc-status: ?3\r\n/);
      const details = /grpc-status-details-bin: ?([A-Za-z0-9+/=]+)/.exec(answer.text)?.[1] ?? "";
      expect(Buffer.from(details, "base64").toString("latin1")).toContain("invalid_request");
    }
  });

  it("still serves a normal request correctly after the barrage, and no request was a server error", async () => {
    cases += 1;
    const outcome = await grpcTyped(
      grpc,
      ReceiptsService.method.listReceipts,
      { userId: holder.userId, pageSize: 10 },
      { "x-api-key": svc.issuerKey },
    );
    expect(outcome.code).toBe(status.OK);
    const list = await connectRaw(
      svc,
      ReceiptsService.method.listReceipts,
      JSON.stringify({ userId: holder.userId }),
      {
        "x-api-key": svc.issuerKey,
      },
    );
    expect(list.status).toBe(200);
    const listed = (JSON.parse(list.text) as { receipts: Array<{ receiptId: string }> }).receipts;
    expect(listed.map((r) => r.receiptId)).toContain(receiptId);
    expect(errorLines(logLines)).toEqual([]);
  });
});
