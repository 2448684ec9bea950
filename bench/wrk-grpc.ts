import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  create,
  type DescMessage,
  fromJson,
  type JsonObject,
  type MessageInitShape,
  toBinary,
} from "@bufbuild/protobuf";
import { LookupKeyRequestSchema } from "../gen/receipts/v1/keys_pb.js";
import { CreatePaymentRequestSchema } from "../gen/receipts/v1/payments_pb.js";
import { ReceiptSchema } from "../gen/receipts/v1/receipt_pb.js";
import {
  EncryptReceiptRequestSchema,
  StoreSealedReceiptRequestSchema,
} from "../gen/receipts/v1/receipts_pb.js";
import { sizedReceiptText } from "./fixtures.js";
import { ZK_GRPC_PATHS } from "./zk-floor.js";

/**
 * The gRPC side of `npm run bench:wrk`: wrk speaks HTTP/1.1 only, so gRPC calls are driven by
 * `bench/h2grpc.c`, a small libnghttp2 client compiled on first use (Debian: gcc, libnghttp2-dev).
 * h2load (nghttp2-client) frames gRPC the same way but posts one fixed body, and the service refuses a
 * second receipt with the same (merchantId, receiptId) as `conflict`: every call after the first would
 * be a refusal answered in 200 with a non-zero `grpc-status`. h2grpc writes a fresh id into each body
 * and counts only answers with `grpc-status: 0` as successes.
 */

/** What one slice of load (wrk's or h2grpc's) saw. */
export interface Slice {
  requests: number;
  seconds: number;
  /** Answers that were not successes (HTTP non-2xx; gRPC: any `grpc-status` but 0). */
  non2xx: number;
  socketErrors: number;
  p50ms: number;
  p99ms: number;
  /** CPU seconds the serving process used during the slice (all threads), when known. */
  cpuSeconds?: number;
  /** The same, of the serving process's main thread only (its event loop). */
  mainThreadCpuSeconds?: number;
  /** The first refusal's status and the start of its body, when there was one. */
  refusal?: string;
}

/** The 16 bytes h2grpc replaces with each call's fresh id (same length: the framing never changes). */
export const GRPC_ID_MARKER = "@".repeat(16);

/** A gRPC load: the h2c address, the method's path, its headers and request templates (files). */
export interface GrpcLoad {
  kind: "grpc";
  pid?: number;
  host: string;
  port: number;
  path: string;
  headers: Record<string, string>;
  templates: string[];
}

const source = fileURLToPath(new URL("../../bench/h2grpc.c", import.meta.url));

/** Compiles h2grpc into `dir`; throws saying what to install when it cannot. */
export function buildH2grpc(dir: string): string {
  const bin = join(dir, "h2grpc");
  const cc = spawnSync("gcc", ["-O2", "-o", bin, source, "-lnghttp2"], { encoding: "utf8" });
  if (cc.error !== undefined || cc.status !== 0) {
    throw new Error(
      `could not build bench/h2grpc.c (apt-get install gcc libnghttp2-dev, or --grpc off):\n${cc.stderr ?? cc.error}`,
    );
  }
  return bin;
}

/** Writes one length-prefixed gRPC request message to `dir/name.bin` and returns its path. */
export function grpcTemplate<Desc extends DescMessage>(
  dir: string,
  name: string,
  schema: Desc,
  init: MessageInitShape<Desc>,
  fresh = true,
): string {
  const bytes = toBinary(schema, create(schema, init));
  const framed = Buffer.alloc(5 + bytes.length);
  framed.writeUInt32BE(bytes.length, 1);
  framed.set(bytes, 5);
  if (fresh && !framed.includes(GRPC_ID_MARKER)) throw new Error(`${name}: the template holds no id marker`);
  const path = join(dir, `${name}.bin`);
  writeFileSync(path, framed);
  return path;
}

/** Parses h2grpc's output line (and its first failure, if any). */
export function parseH2grpc(text: string): Slice {
  const m =
    /requests (\d+) ok (\d+) failed (\d+) connection-errors (\d+) seconds ([\d.]+) p50_ms ([\d.]+) p99_ms ([\d.]+)/.exec(
      text,
    );
  if (m === null) throw new Error(`h2grpc printed no summary:\n${text}`);
  const refusal = /first-failure: (.*)/.exec(text)?.[1];
  return {
    requests: Number(m[2]),
    seconds: Number(m[5]),
    non2xx: Number(m[3]),
    socketErrors: Number(m[4]),
    p50ms: Number(m[6]),
    p99ms: Number(m[7]),
    ...(refusal === undefined ? {} : { refusal }),
  };
}

let prefixCounter = 0;

/** A 7-character id prefix no earlier slice of this run used. */
function slicePrefix(): string {
  const n = prefixCounter++;
  return `${n.toString(36).padStart(2, "0")}${Date.now().toString(36).slice(-5)}`;
}

/**
 * Runs one h2grpc slice: `connections` HTTP/2 connections with `streams` calls in flight on each.
 * Its `requests` are the successes only (grpc-status 0); the rest are counted in `non2xx`.
 */
export function runH2grpc(
  bin: string,
  load: GrpcLoad,
  seconds: number,
  connections: number,
  streams: number,
): Promise<Slice> {
  const argv = [
    ...["-h", load.host, "-P", String(load.port), "-u", load.path, "-d", String(seconds)],
    ...["-c", String(connections), "-m", String(streams), "-x", slicePrefix()],
    ...Object.entries(load.headers).flatMap(([k, v]) => ["-H", `${k}: ${v}`]),
    ...load.templates,
  ];
  return new Promise((resolve, reject) => {
    const child = spawn(bin, argv, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString("utf8");
    });
    child.stderr.on("data", (chunk: Buffer) => {
      out += chunk.toString("utf8");
    });
    child.on("error", reject);
    child.on("close", () => {
      try {
        resolve(parseH2grpc(out));
      } catch (e) {
        reject(e);
      }
    });
  });
}

/** The service's and the bare route's h2c addresses (the service takes gRPC on its HTTP port). */
export interface GrpcAddresses {
  service: { url: string; apiKey: string };
  baseline: { url: string };
}

/** `host` and `port` of an http:// URL. */
function hostPort(url: string): { host: string; port: number } {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port) };
}

/** A receipt of `items` line items for `hashedPan`, its ids the marker (`r-<marker>`, `t-<marker>`). */
function markedReceipt(hashedPan: string, items: number, amount?: number) {
  const json = JSON.parse(sizedReceiptText(hashedPan, items, amount)) as JsonObject;
  json.receiptId = `r-${GRPC_ID_MARKER}`;
  json.transactionId = `t-${GRPC_ID_MARKER}`;
  return fromJson(ReceiptSchema, json);
}

/**
 * gRPC encrypt and create payment at `items` line items, for the service and the bare `node:http2`
 * handler of the baseline, one template per cardholder (in turn), each call with a fresh id.
 */
export function grpcLoadsOf(dir: string, at: GrpcAddresses, hashedPans: string[], items: number) {
  const svc = {
    kind: "grpc" as const,
    ...hostPort(at.service.url),
    headers: { "x-api-key": at.service.apiKey },
  };
  const base = { kind: "grpc" as const, ...hostPort(at.baseline.url), headers: {} };
  const encrypt = hashedPans.map((pan, i) =>
    grpcTemplate(dir, `grpc-enc-${items}-${i}`, EncryptReceiptRequestSchema, {
      receipt: markedReceipt(pan, items),
    }),
  );
  const create = hashedPans.map((pan, i) =>
    grpcTemplate(dir, `grpc-pay-${items}-${i}`, CreatePaymentRequestSchema, {
      gateway: "gateway_a",
      receipt: markedReceipt(pan, items, 950),
    }),
  );
  const encryptPath = "/receipts.v1.ReceiptsService/EncryptReceipt";
  const createPath = "/receipts.v1.PaymentsService/CreatePayment";
  return [
    {
      load: "gRPC encrypt",
      service: { ...svc, path: encryptPath, templates: encrypt },
      baseline: { ...base, path: encryptPath, templates: encrypt },
    },
    {
      load: "gRPC create payment",
      service: { ...svc, path: createPath, templates: create },
      baseline: { ...base, path: createPath, templates: create },
    },
  ];
}

/**
 * The zero-knowledge path over gRPC, `KeysService/LookupKey` and `ReceiptsService/StoreSealedReceipt`,
 * for the service and the bare routes of bench/zk-floor.ts on the baseline's handler: one template per
 * cardholder (in turn); the sealed bodies carry the card's current key id, a fresh id in each call and
 * random bytes of the sizes a real envelope of a receipt of `items` line items has.
 */
export function zkGrpcLoadsOf(
  dir: string,
  at: GrpcAddresses,
  cardholders: { hashedPan: string; keyId: string }[],
  items: number,
) {
  const svc = {
    kind: "grpc" as const,
    ...hostPort(at.service.url),
    headers: { "x-api-key": at.service.apiKey },
  };
  const base = { ...svc, ...hostPort(at.baseline.url) };
  const plaintextBytes = Buffer.byteLength(sizedReceiptText(cardholders[0]?.hashedPan ?? "", items));
  const lookup = cardholders.map((c, i) =>
    grpcTemplate(dir, `grpc-lookup-${i}`, LookupKeyRequestSchema, { recipientHashedPan: c.hashedPan }, false),
  );
  const sealed = cardholders.map((c, i) =>
    grpcTemplate(dir, `grpc-sealed-${items}-${i}`, StoreSealedReceiptRequestSchema, {
      recipientHashedPan: c.hashedPan,
      version: "1.0",
      receiptId: `r-${GRPC_ID_MARKER}`,
      merchantId: "m-bench",
      transactionId: `t-${GRPC_ID_MARKER}`,
      keyBundle: { keyId: c.keyId, algorithm: "RSA-OAEP-256", encryptedAesKey: randomBytes(256) },
      ciphertext: randomBytes(plaintextBytes),
      iv: randomBytes(12),
      authTag: randomBytes(16),
    }),
  );
  return [
    {
      load: "gRPC keys/lookup",
      service: { ...svc, path: ZK_GRPC_PATHS.lookup, templates: lookup },
      baseline: { ...base, path: ZK_GRPC_PATHS.lookup, templates: lookup },
    },
    {
      load: "gRPC receipts/sealed",
      service: { ...svc, path: ZK_GRPC_PATHS.sealed, templates: sealed },
      baseline: { ...base, path: ZK_GRPC_PATHS.sealed, templates: sealed },
    },
  ];
}
