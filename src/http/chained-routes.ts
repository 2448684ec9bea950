import type { DescMethodUnary } from "@bufbuild/protobuf";
import { type ContextValues, createContextValues, type Interceptor } from "@connectrpc/connect";
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { kProtocol, kRemoteAddress } from "../rpc/context.js";
import { isProtocolHeader } from "../rpc/error-mapping.js";
import { CallHeaders } from "./call-headers.js";
import { answerFastifyError, fastifyErrorOf, sendError } from "./envelope.js";
import { createRouteInvoker, type RouteInvoker } from "./invoke.js";

/**
 * The adapter of the routes beside the API (the operator API, the key log's reads) to the chain
 * (src/rpc/chain.ts): each request of such a route is one call of its method of
 * src/rpc/route-services.ts through the same interceptor instances as every RPC. It only translates:
 * the call starts when the request arrives (so the access step, and its refusal, come before the body
 * is read, as for a gRPC call), Fastify reads the body once the chain has let the call in, the route's
 * work runs as the call's implementation, and the chain's response headers (request id, rate limits)
 * go on the answer; an error anywhere, the body's included, is answered in the REST envelope from the
 * chain's mapped error.
 */

/** What a route's work answers: writes the answer on the reply, once the chain's headers are on it. */
export type Answer = (reply: FastifyReply) => FastifyReply;

/** One route whose requests pass the chain. */
export interface ChainedRoute {
  method: "GET" | "POST" | "PUT" | "DELETE";
  url: string;
  /** The route's method of src/rpc/route-services.ts: what the chain knows the call as. */
  rpc: DescMethodUnary;
  /** The route's work, with the body read: the call's implementation. */
  run: (request: FastifyRequest) => Promise<Answer>;
}

/** What {@link registerChainedRoutes} needs. */
export interface ChainedRoutesOptions {
  /** The chain: the instances every other way in uses. */
  interceptors: readonly Interceptor[];
  /** The client address of a request (through the trusted-proxy rule). */
  clientAddress: (request: FastifyRequest) => string;
}

/** A call under way: the route's work, settled by the handler (or the body's error), and its answer sent. */
interface PendingCall {
  settle: (work: Promise<Answer>) => void;
  answered: Promise<unknown>;
  settled: boolean;
}

/** The request member holding its call under way. */
const PENDING = "chainedCall";

declare module "fastify" {
  interface FastifyRequest {
    chainedCall: PendingCall | null;
  }
}

/** Registers `routes` on `scope`, each request one call through the chain. */
export function registerChainedRoutes(
  scope: FastifyInstance,
  routes: readonly ChainedRoute[],
  options: ChainedRoutesOptions,
): void {
  const invoke = createRouteInvoker(options.interceptors);
  // The call under way rides on its request (a decorated member), not in a map keyed by requests: the
  // key log's public reads are a hot path, and a long-lived WeakMap of per-call values keeps every
  // call's objects alive past the young generation's collections.
  if (!scope.hasRequestDecorator(PENDING)) scope.decorateRequest(PENDING, null);
  for (const route of routes) {
    scope.route({
      method: route.method,
      url: route.url,
      onRequest: (request, reply, done) => {
        request[PENDING] = startCall(invoke, route, options, { request, reply, done });
      },
      handler: (request, reply) => {
        const call = request[PENDING] as PendingCall;
        call.settle(route.run(request));
        return call.answered.then(() => reply);
      },
      errorHandler: (error: FastifyError, request, reply) => {
        const call = request[PENDING];
        if (call === null || call.settled) return answerFastifyError(request, reply, error, undefined);
        call.settle(
          fastifyErrorOf(request, error, request.routeOptions.bodyLimit).then((e) => Promise.reject(e)),
        );
        return call.answered.then(() => reply);
      },
    });
  }
}

/** The first context values of a call, as every way in sets them; kept on the request for the server's hooks. */
function contextOf(request: FastifyRequest, options: ChainedRoutesOptions): ContextValues {
  const values = createContextValues();
  values.set(kRemoteAddress, options.clientAddress(request));
  values.set(kProtocol, "rest");
  request.callContext = values;
  return values;
}

/**
 * Starts the call of a request through the chain; its innermost step lets Fastify go on (`done`: read
 * the body, run the handler) and waits for the route's work.
 */
function startCall(
  invoke: RouteInvoker,
  route: ChainedRoute,
  options: ChainedRoutesOptions,
  { request, reply, done }: { request: FastifyRequest; reply: FastifyReply; done: () => void },
): PendingCall {
  let settle: (work: Promise<Answer>) => void = () => {};
  const work = new Promise<Answer>((resolve) => {
    settle = resolve;
  });
  const call: PendingCall = {
    settle: (outcome) => {
      call.settled = true;
      settle(outcome);
    },
    settled: false,
    answered: Promise.resolve(),
  };
  let signal: AbortSignal | undefined;
  call.answered = invoke(
    {
      method: route.rpc,
      header: CallHeaders.fromNode(request.headers, isProtocolHeader),
      contextValues: contextOf(request, options),
      // Made only if something asks (no route's work does): an AbortController made for every
      // request was about a twentieth of a key log read's CPU time. None is ever aborted.
      signal: () => {
        signal ??= new AbortController().signal;
        return signal;
      },
      url: request.url,
      requestMethod: request.method,
    },
    () => {
      done();
      return work;
    },
  )
    .then(
      ({ result, header }) => {
        header.forEach((value, name) => {
          if (!isProtocolHeader(name)) reply.header(name, value);
        });
        return result(reply);
      },
      (err) => sendError(request, reply, err),
    )
    .catch((err) => request.log.error({ err }, "an answer could not be sent"));
  return call;
}
