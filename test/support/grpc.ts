import {
  create,
  type DescMessage,
  type DescService,
  fromBinary,
  type MessageInitShape,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
import {
  credentials,
  type Client as GrpcClient,
  type Metadata,
  makeGenericClientConstructor,
  type ServiceDefinition,
  type ServiceError,
} from "@grpc/grpc-js";

/** A grpc-js client for `service`, built from the protobuf-es descriptors (no proto-loader). */
export function grpcClient(service: DescService, port: number): GrpcClient & Record<string, unknown> {
  const definition: Record<string, ServiceDefinition[string]> = {};
  for (const method of service.methods) {
    definition[method.localName] = {
      path: `/${service.typeName}/${method.name}`,
      originalName: method.name,
      requestStream: method.methodKind === "client_streaming" || method.methodKind === "bidi_streaming",
      responseStream: method.methodKind === "server_streaming" || method.methodKind === "bidi_streaming",
      requestSerialize: (init: MessageInitShape<DescMessage>) =>
        Buffer.from(toBinary(method.input, create(method.input, init))),
      requestDeserialize: (bytes: Buffer) => fromBinary(method.input, bytes),
      responseSerialize: (message: MessageShape<DescMessage>) =>
        Buffer.from(toBinary(method.output, message)),
      responseDeserialize: (bytes: Buffer) => fromBinary(method.output, bytes),
    };
  }
  const Client = makeGenericClientConstructor(definition, service.name);
  return new Client(`127.0.0.1:${port}`, credentials.createInsecure()) as GrpcClient &
    Record<string, unknown>;
}

/** The outcome of one grpc-js unary call: the response or error, initial metadata and status metadata. */
export interface GrpcResult<T> {
  response?: T;
  error?: ServiceError;
  header: Metadata;
}

/** Calls a unary method on a grpc-js client built by {@link grpcClient}. */
export function grpcUnary<T>(
  client: Record<string, unknown>,
  method: string,
  request: unknown,
  metadata: Metadata,
) {
  return new Promise<GrpcResult<T>>((resolve) => {
    let header: Metadata | undefined;
    const fn = client[method] as (...args: unknown[]) => {
      on(event: string, cb: (m: Metadata) => void): void;
    };
    const call = fn.call(client, request, metadata, (error: ServiceError | null, response?: T) => {
      const result: GrpcResult<T> = { header: header ?? (error?.metadata as Metadata) };
      if (error) result.error = error;
      else if (response !== undefined) result.response = response;
      resolve(result);
    });
    call.on("metadata", (m) => {
      header = m;
    });
  });
}
