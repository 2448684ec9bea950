import {
  create,
  type DescMessage,
  type DescService,
  fromBinary,
  isMessage,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { sha256Hex } from "../crypto/digest.js";
import type { DomainDeps } from "../domain/deps.js";
import { withIdempotency } from "../domain/idempotency.js";
import { principalOf } from "./convert.js";
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
 * The idempotency step, the last of the chain (src/rpc/chain.ts), applied where the services are
 * registered: every unary method of `impl` whose policy says `idempotent` runs at most once per
 * `Idempotency-Key` of the caller's API key (`withIdempotency`): a retry with the same key and request
 * gets the first response, marked with {@link REPLAYED_HEADER}, a different request is `conflict`. The
 * request is hashed and the response kept in their protobuf binary form.
 *
 * It wraps the implementation rather than being an interceptor because a replayed answer must carry
 * the call's own response headers (the request id, the rate-limit headers), and connect-es writes the
 * handler context's headers, which an interceptor that answers without calling on never sees.
 */
export function idempotentMethods<S extends DescService>(
  deps: IdempotencyDeps,
  service: S,
  impl: ServiceImpl<S>,
): ServiceImpl<S> {
  const idempotent = service.methods.filter((m) => {
    const policy = policyOf(m);
    return m.methodKind === "unary" && policy !== "public" && policy.idempotent;
  });
  if (idempotent.length === 0) return impl;
  const wrapped: Record<string, unknown> = { ...impl };
  for (const method of idempotent) {
    const run = (impl as Record<string, (req: unknown, ctx: HandlerContext) => Promise<unknown>>)[
      method.localName
    ];
    if (run === undefined) continue;
    const runAsMessage = async (req: MessageShape<DescMessage>, ctx: HandlerContext) => {
      const out = await run(req, ctx);
      return isMessage(out, method.output) ? out : create(method.output, out as never);
    };
    wrapped[method.localName] = (req: MessageShape<DescMessage>, ctx: HandlerContext) => {
      // Without a key (nearly every call) withIdempotency runs the call as it is: it is not entered,
      // with the closures and the call description it would be given. A key sent empty is a key (its
      // format check refuses it), not its absence.
      const key = ctx.requestHeader.get(IDEMPOTENCY_HEADER);
      if (key === null) return runAsMessage(req, ctx);
      return idempotently(deps, ctx, key, { schema: method.input, message: req }, method.output, () =>
        runAsMessage(req, ctx),
      );
    };
  }
  return wrapped as ServiceImpl<S>;
}

/** Runs `run` at most once per `Idempotency-Key` of the caller (see {@link idempotentMethods}). */
function idempotently<I extends DescMessage, O extends DescMessage>(
  deps: IdempotencyDeps,
  ctx: HandlerContext,
  key: string,
  request: { schema: I; message: MessageShape<I> },
  response: O,
  run: () => Promise<MessageShape<O>>,
): Promise<MessageShape<O>> {
  return withIdempotency<MessageShape<O>>(
    deps,
    {
      key,
      scope: principalOf(ctx).id,
      hashRequest: () => sha256Hex(toBinary(request.schema, request.message)),
      encode: (res) => Buffer.from(toBinary(response, res)),
      decode: (bytes) => fromBinary(response, bytes),
      replayed: () => ctx.responseHeader.set(REPLAYED_HEADER, "true"),
    },
    run,
  );
}
