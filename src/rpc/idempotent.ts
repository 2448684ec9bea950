import { fromBinary, toBinary } from "@bufbuild/protobuf";
import type { Interceptor, UnaryRequest, UnaryResponse } from "@connectrpc/connect";
import { sha256Hex } from "../crypto/digest.js";
import type { DomainDeps } from "../domain/deps.js";
import { withIdempotency } from "../domain/idempotency.js";
import { AppError } from "../errors.js";
import { kPrincipal } from "./context.js";
import { policyOf } from "./policy.js";

/** The request header (gRPC metadata) that makes a create idempotent. */
export const IDEMPOTENCY_HEADER = "idempotency-key";

/**
 * The response header (gRPC and Connect: response metadata) of a replayed answer: `true` when the
 * response is the stored one of an earlier call with the same `Idempotency-Key` (README, "Responses and
 * errors").
 */
export const REPLAYED_HEADER = "idempotent-replayed";

/** What the idempotency step needs of the domain's dependencies. */
export type IdempotencyDeps = Pick<DomainDeps, "store" | "clock" | "pepper" | "logger">;

/**
 * The idempotency step of the chain: runs an RPC whose policy says `idempotent` at most once per
 * `Idempotency-Key` of the caller's API key (`withIdempotency`): a retry with the same key and request
 * gets the first response, marked with {@link REPLAYED_HEADER}, a different request is `conflict`. The
 * request is hashed and the response kept in their protobuf binary form. Runs after authentication
 * (the key's scope is the caller's API key) and for unary calls only.
 */
export function idempotencyInterceptor(deps: IdempotencyDeps): Interceptor {
  return (next) => async (req) => {
    if (req.stream) return next(req);
    const policy = policyOf(req.method);
    const key = req.header.get(IDEMPOTENCY_HEADER);
    if (policy === "public" || !policy.idempotent || key === null || key === "") return next(req);
    const principal = req.contextValues.get(kPrincipal);
    if (principal === undefined)
      throw new AppError("internal_server_error", "Idempotency without a principal.");
    let first: UnaryResponse | undefined;
    const message = await withIdempotency(
      deps,
      {
        key,
        scope: principal.id,
        hashRequest: () => sha256Hex(toBinary(req.method.input, req.message)),
        encode: (res) => Buffer.from(toBinary(req.method.output, res)),
        decode: (bytes) => fromBinary(req.method.output, bytes),
      },
      async () => {
        first = (await next(req)) as UnaryResponse;
        return first.message;
      },
    );
    return first ?? replayed(req, message);
  };
}

/** The answer of a retry: the first call's response message, marked as replayed. */
function replayed(req: UnaryRequest, message: UnaryResponse["message"]): UnaryResponse {
  return {
    stream: false,
    service: req.service,
    method: req.method,
    header: new Headers({ [REPLAYED_HEADER]: "true" }),
    trailer: new Headers(),
    message,
  };
}
