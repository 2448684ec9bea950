import {
  create,
  createRegistry,
  type DescFile,
  type DescService,
  fromBinary,
  type MessageInitShape,
  type Registry,
  toBinary,
} from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, type ConnectRouter, type ServiceImpl } from "@connectrpc/connect";
import {
  ServerReflection,
  type ServerReflectionRequest,
  ServerReflectionRequestSchema,
  type ServerReflectionResponse,
  ServerReflectionResponseSchema,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import {
  ServerReflection as ServerReflectionV1Alpha,
  ServerReflectionRequestSchema as V1AlphaRequestSchema,
  ServerReflectionResponseSchema as V1AlphaResponseSchema,
} from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";

/** The two reflection services: v1, and v1alpha for older clients (grpcurl before 1.9, some meshes). */
export const REFLECTION_SERVICES = [ServerReflection, ServerReflectionV1Alpha] as const;

/**
 * gRPC server reflection (`grpc.reflection.v1` and `v1alpha`), so that `buf curl`, grpcurl, Postman
 * and service-mesh tooling can list the services and call them without a copy of the protos. It
 * answers from the descriptors the service was generated from (protobuf-es embeds them): files by
 * name, the file that declares a symbol (service, method, message, field, enum, extension), extension
 * numbers, and the list of services. A file comes with every file it imports, transitively (the
 * vendored googleapis protos, the well-known types), as the reflection protocol asks.
 */
export function registerReflection(router: ConnectRouter, services: readonly DescService[]): void {
  const all = [...services, ...REFLECTION_SERVICES];
  const answer = reflectionAnswerer(all);
  const v1: ServiceImpl<typeof ServerReflection> = {
    async *serverReflectionInfo(requests) {
      for await (const request of requests) yield answer(request);
    },
  };
  // v1alpha is the same protocol under another package: the messages are identical on the wire.
  const v1alpha: ServiceImpl<typeof ServerReflectionV1Alpha> = {
    async *serverReflectionInfo(requests) {
      for await (const request of requests) {
        const asV1 = fromBinary(ServerReflectionRequestSchema, toBinary(V1AlphaRequestSchema, request));
        yield fromBinary(V1AlphaResponseSchema, toBinary(ServerReflectionResponseSchema, answer(asV1)));
      }
    },
  };
  router.service(ServerReflection, v1);
  router.service(ServerReflectionV1Alpha, v1alpha);
}

/** One of the answers a reflection response carries. */
type ResponseCase = NonNullable<MessageInitShape<typeof ServerReflectionResponseSchema>["messageResponse"]>;

/** Answers one reflection request from the files of `services` and their imports. */
export function reflectionAnswerer(
  services: readonly DescService[],
): (request: ServerReflectionRequest) => ServerReflectionResponse {
  const catalogue = catalogueOf(services);
  return (request) =>
    create(ServerReflectionResponseSchema, {
      validHost: request.host,
      originalRequest: request,
      messageResponse: answer(catalogue, request.messageRequest),
    });
}

/** What reflection answers from: the files of the services and of their imports, indexed. */
interface Catalogue {
  /** Every file, by the name it is imported under (`receipts/v1/keys.proto`). */
  files: Map<string, DescFile>;
  registry: Registry;
  /** The fully qualified names of the services, in the order given. */
  serviceNames: string[];
  /** The encoded file descriptor of `file` first, then of every file it imports, each once. */
  withImports(file: DescFile): Uint8Array[];
}

function catalogueOf(services: readonly DescService[]): Catalogue {
  const files = new Map<string, DescFile>();
  const addFile = (file: DescFile): void => {
    if (files.has(file.proto.name)) return;
    files.set(file.proto.name, file);
    for (const dependency of file.dependencies) addFile(dependency);
  };
  for (const service of services) addFile(service.file);
  // Encoded on first request, then kept: the descriptors never change while the process runs.
  const encoded = new Map<string, Uint8Array>();
  const bytesOf = (file: DescFile): Uint8Array => {
    let bytes = encoded.get(file.name);
    if (bytes === undefined) {
      bytes = toBinary(FileDescriptorProtoSchema, file.proto);
      encoded.set(file.name, bytes);
    }
    return bytes;
  };
  const withImports = (file: DescFile): Uint8Array[] => {
    const seen = new Set<string>();
    const out: Uint8Array[] = [];
    const visit = (f: DescFile): void => {
      if (seen.has(f.name)) return;
      seen.add(f.name);
      out.push(bytesOf(f));
      for (const dependency of f.dependencies) visit(dependency);
    };
    visit(file);
    return out;
  };
  return {
    files,
    registry: createRegistry(...files.values()),
    serviceNames: services.map((service) => service.typeName),
    withImports,
  };
}

/** The answer to one request; what cannot be found is NOT_FOUND, an unknown kind of request UNIMPLEMENTED. */
function answer(
  { files, registry, serviceNames, withImports }: Catalogue,
  messageRequest: ServerReflectionRequest["messageRequest"],
): ResponseCase {
  const filesOf = (file: DescFile | undefined, what: string): ResponseCase =>
    file === undefined
      ? notFound(what)
      : { case: "fileDescriptorResponse", value: { fileDescriptorProto: withImports(file) } };
  switch (messageRequest.case) {
    case "listServices":
      return { case: "listServicesResponse", value: { service: serviceNames.map((name) => ({ name })) } };
    case "fileByFilename":
      return filesOf(files.get(messageRequest.value), `File "${messageRequest.value}"`);
    case "fileContainingSymbol":
      return filesOf(fileOfSymbol(registry, messageRequest.value), `Symbol "${messageRequest.value}"`);
    case "fileContainingExtension": {
      const { containingType, extensionNumber } = messageRequest.value;
      const extendee = registry.getMessage(containingType);
      const extension = extendee && registry.getExtensionFor(extendee, extensionNumber);
      return filesOf(extension?.file, `Extension ${extensionNumber} of "${containingType}"`);
    }
    case "allExtensionNumbersOfType":
      return extensionNumbersOf(registry, messageRequest.value);
    default:
      return {
        case: "errorResponse",
        value: { errorCode: Code.Unimplemented, errorMessage: "Unknown reflection request." },
      };
  }
}

/** The numbers of every extension of the message `typeName`, ascending. */
function extensionNumbersOf(registry: Registry, typeName: string): ResponseCase {
  if (registry.getMessage(typeName) === undefined) return notFound(`Type "${typeName}"`);
  const numbers: number[] = [];
  for (const desc of registry) {
    if (desc.kind === "extension" && desc.extendee.typeName === typeName) numbers.push(desc.number);
  }
  return {
    case: "allExtensionNumbersResponse",
    value: { baseTypeName: typeName, extensionNumber: numbers.sort((a, b) => a - b) },
  };
}

function notFound(what: string): ResponseCase {
  return { case: "errorResponse", value: { errorCode: Code.NotFound, errorMessage: `${what} not found` } };
}

/**
 * The file declaring a fully qualified symbol: a type, service or extension, or a member of one (a
 * method, field, enum value or oneof), looked up by its parent's name.
 */
function fileOfSymbol(registry: Registry, symbol: string): DescFile | undefined {
  const name = symbol.startsWith(".") ? symbol.slice(1) : symbol;
  const desc = registry.get(name);
  if (desc !== undefined) return desc.file;
  const dot = name.lastIndexOf(".");
  if (dot <= 0) return undefined;
  const parent = registry.get(name.slice(0, dot));
  const member = name.slice(dot + 1);
  switch (parent?.kind) {
    case "service":
      return parent.methods.some((m) => m.name === member) ? parent.file : undefined;
    case "message":
      return parent.fields.some((f) => f.name === member) || parent.oneofs.some((o) => o.name === member)
        ? parent.file
        : undefined;
    case "enum":
      return parent.values.some((v) => v.name === member) ? parent.file : undefined;
    default:
      return undefined;
  }
}
