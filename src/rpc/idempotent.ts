import { type DescMessage, fromBinary, type MessageShape, toBinary } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { sha256Hex } from "../crypto/digest.js";
import type { DomainDeps } from "../domain/deps.js";
import { withIdempotency } from "../domain/idempotency.js";
import { principalOf } from "./convert.js";

/** The request header (gRPC metadata) that makes a create idempotent. */
export const IDEMPOTENCY_HEADER = "idempotency-key";

/**
 * The response header (gRPC and Connect: response metadata) of a replayed answer: `true` when the
 * response is the stored one of an earlier call with the same `Idempotency-Key` (README, "Responses and
 * errors").
 */
export const REPLAYED_HEADER = "idempotent-replayed";

/**
 * Runs a create RPC at most once per `Idempotency-Key` of the caller's API key (`withIdempotency`):
 * a retry with the same key and request gets the first response, marked with {@link REPLAYED_HEADER},
 * a different request is `conflict`. The request is hashed and the response kept in their protobuf
 * binary form.
 */
export function idempotently<I extends DescMessage, O extends DescMessage>(
  deps: DomainDeps,
  ctx: HandlerContext,
  request: { schema: I; message: MessageShape<I> },
  response: O,
  run: () => Promise<MessageShape<O>>,
): Promise<MessageShape<O>> {
  return withIdempotency<MessageShape<O>>(
    deps,
    {
      key: ctx.requestHeader.get(IDEMPOTENCY_HEADER),
      scope: principalOf(ctx).id,
      hashRequest: () => sha256Hex(toBinary(request.schema, request.message)),
      encode: (res) => Buffer.from(toBinary(response, res)),
      decode: (bytes) => fromBinary(response, bytes),
      replayed: () => ctx.responseHeader.set(REPLAYED_HEADER, "true"),
    },
    run,
  );
}
