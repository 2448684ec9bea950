/**
 * The hand-written fast paths, the one door to them, and the one switch (`FAST_PATHS`, read by
 * src/config.ts). Each stands in for a library on a hot path, gives the library's answer for every
 * input (falling back to it where it does not handle one), and is property-tested against it:
 *
 * - `grpc-server`: unary binary gRPC served straight from the HTTP/2 stream (grpc-unary.ts) instead of
 *   connect-node through connect-fastify.
 * - `json-reader`: compiled REST JSON readers (json-input.ts) instead of protobuf-es's `fromJson`.
 * - `json-writer`: compiled REST JSON writers (json-output.ts) instead of `toJson`.
 * - `one-pass`: a REST body read by the compiled reader alone, its field-by-field check run only
 *   when the reader gives up (it gives up on everything the check would name), instead of checked and
 *   then read. Needs `json-reader`.
 * - `der`: RSA keys read from DER into JWKs by hand (der.ts), because Node imports an RSA JWK many
 *   times faster than the same key in DER, instead of OpenSSL's DER parser.
 *
 * With all of them off, every call goes through connect-node/connect-fastify, protobuf-es and
 * node:crypto only. The setting is process-wide, made once before serving (`useFastPaths`, by
 * `buildApp` and by each crypto worker); the rest of the service imports from this file only.
 */
import type { JsonWebKey } from "node:crypto";
import type { DescMessage, JsonValue, MessageShape } from "@bufbuild/protobuf";
import { messageFromJsonReflective, messageToJsonReflective } from "../rpc/json-reflective.js";
import * as der from "./der.js";
import { createGrpcUnaryHandler, type GrpcUnaryOptions } from "./grpc-unary.js";
import { compiledJsonReader, compiledMessageFromJson } from "./json-input.js";
import { compiledMessageToJson } from "./json-output.js";
import { isOn } from "./switch.js";

export { FAST_PATH_NEEDS, FAST_PATHS, type FastPath, fastPathsOn, isOn, useFastPaths } from "./switch.js";

/** A REST JSON request body as a message of `schema`; throws what `fromJson` throws. */
export function messageFromJson<Desc extends DescMessage>(schema: Desc, json: JsonValue): MessageShape<Desc> {
  return isOn("json-reader")
    ? compiledMessageFromJson(schema, json)
    : messageFromJsonReflective(schema, json);
}

/**
 * A REST JSON request read without its field-by-field check first (`one-pass`), or undefined: when
 * one-pass reading is off, when `schema` has no compiled reader, when `assemble` (the request JSON
 * from body and URL, unchecked) gives none, or when the reader gives up on it (which it does on
 * everything the check would name). Then the caller checks and reads.
 */
export function readUnchecked<Desc extends DescMessage>(
  schema: Desc,
  assemble: () => JsonValue | undefined,
): MessageShape<Desc> | undefined {
  if (!isOn("one-pass") || !isOn("json-reader")) return undefined;
  const read = compiledJsonReader(schema);
  if (read === undefined) return undefined;
  const json = assemble();
  if (json === undefined) return undefined;
  try {
    return read(json);
  } catch {
    return undefined;
  }
}

/** A message as REST JSON (see src/rpc/json-reflective.ts). */
export function messageToJson<Desc extends DescMessage>(
  schema: Desc,
  message: MessageShape<Desc>,
): JsonValue {
  return isOn("json-writer")
    ? compiledMessageToJson(schema, message)
    : messageToJsonReflective(schema, message);
}

/**
 * The handler of unary gRPC calls on the HTTP/2 stream for the one-port listener, or undefined when
 * `grpc-server` is off (then every gRPC call goes through the Connect plugin).
 */
export function grpcServer(options: GrpcUnaryOptions): ReturnType<typeof createGrpcUnaryHandler> | undefined {
  return isOn("grpc-server") ? createGrpcUnaryHandler(options) : undefined;
}

export type { GrpcRefusal, GrpcUnaryOptions } from "./grpc-unary.js";
export { kGrpcFastPath } from "./grpc-unary.js";

/**
 * An RSA key's JWK read by hand from its DER, or undefined when `der` is off or the DER is not the
 * canonical shape the reader takes: the caller then lets OpenSSL parse the DER.
 */
export const rsaJwkFromDer = {
  privatePkcs1: (bytes: Uint8Array): JsonWebKey | undefined =>
    isOn("der") ? der.rsaPrivateJwkFromPkcs1(bytes) : undefined,
  privatePkcs8: (bytes: Uint8Array): JsonWebKey | undefined =>
    isOn("der") ? der.rsaPrivateJwkFromPkcs8(bytes) : undefined,
  publicPkcs1: (bytes: Uint8Array): JsonWebKey | undefined =>
    isOn("der") ? der.rsaPublicJwkFromPkcs1(bytes) : undefined,
  publicSpki: (bytes: Uint8Array): JsonWebKey | undefined =>
    isOn("der") ? der.rsaPublicJwkFromSpki(bytes) : undefined,
};
