import { create, createFileRegistry, type DescMethodUnary, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, file_google_protobuf_empty } from "@bufbuild/protobuf/wkt";

/**
 * The two surfaces beside the API that are not protobuf RPCs, the operator API (`/admin/v1`) and the
 * key log's public reads (`/kt/v1`), as services of the chain (src/rpc/chain.ts). Their routes read
 * and write JSON, text and bytes of their own, but each call passes the chain as a method of one of
 * these services, so the request id, the log line, the metrics, the error mapping and the access step
 * (which asks {@link accessOf} in policy.ts how a call of each is let in) are the API's own. The
 * descriptors are made here, at start-up, from a descriptor written in code: methods taking and
 * returning `google.protobuf.Empty`, as the messages stay on the routes' side.
 */

/** The operations of the operator API, one per route of `ADMIN_ROUTES` (src/http/admin.ts). */
const OPERATOR_METHODS = [
  "CreateApiKey",
  "ListApiKeys",
  "RevokeApiKey",
  "SetBins",
  "GetBins",
  "AssignMerchant",
  "TransferCard",
  "ReadAudit",
  "CountEscrow",
  "CreateAuditor",
  "ListAuditors",
  "RevokeAuditor",
  "ConfirmRoot",
  "SetRequireBindings",
  "SetPlaintextIntake",
] as const;

/** The key log's public reads, one per route of src/http/kt.ts. */
const KEY_LOG_METHODS = [
  "GetCheckpoint",
  "GetConsistencyProof",
  "GetInclusionProof",
  "GetTile",
  "GetDirectory",
  "ListEntries",
] as const;

export type OperatorMethodName = (typeof OPERATOR_METHODS)[number];
export type KeyLogMethodName = (typeof KEY_LOG_METHODS)[number];

/** One service of unary methods from `google.protobuf.Empty` to `google.protobuf.Empty`. */
function serviceOf(pkg: string, name: string, methods: readonly string[]): DescService {
  const file = create(FileDescriptorProtoSchema, {
    name: `${pkg.replaceAll(".", "/")}/${name.toLowerCase()}.proto`,
    package: pkg,
    dependency: ["google/protobuf/empty.proto"],
    syntax: "proto3",
    service: [
      {
        name,
        method: methods.map((method) => ({
          name: method,
          inputType: ".google.protobuf.Empty",
          outputType: ".google.protobuf.Empty",
        })),
      },
    ],
  });
  const registry = createFileRegistry(file, (dependency) =>
    dependency === `${file_google_protobuf_empty.name}.proto` ? file_google_protobuf_empty : undefined,
  );
  const service = registry.getService(`${pkg}.${name}`);
  if (service === undefined) throw new Error(`${pkg}.${name} was not made`);
  return service;
}

/** The methods of `service` by name, each unary. */
function methodsOf<N extends string>(service: DescService): Record<N, DescMethodUnary> {
  const out: Record<string, DescMethodUnary> = {};
  for (const method of service.methods) {
    if (method.methodKind === "unary") out[method.name] = method as DescMethodUnary;
  }
  return out as Record<N, DescMethodUnary>;
}

/** The operator API as a service of the chain: every call needs the operator token. */
export const OperatorApi: DescService = serviceOf("receipts.operator.v1", "OperatorApi", OPERATOR_METHODS);

/** The key log's public reads as a service of the chain: anyone, counted per client address. */
export const KeyLogReads: DescService = serviceOf("receipts.kt.v1", "KeyLogReads", KEY_LOG_METHODS);

/** The operator API's methods by name. */
export const OPERATOR: Record<OperatorMethodName, DescMethodUnary> = methodsOf(OperatorApi);

/** The key log reads' methods by name. */
export const KEY_LOG: Record<KeyLogMethodName, DescMethodUnary> = methodsOf(KeyLogReads);
