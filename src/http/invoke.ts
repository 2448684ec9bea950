import {
  create,
  type DescMethodUnary,
  type DescService,
  isMessage,
  type MessageShape,
} from "@bufbuild/protobuf";
import {
  type ConnectRouter,
  type ContextValues,
  createContextKey,
  createMethodImplSpec,
  createServiceImplSpec,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import { CallHeaders } from "./call-headers.js";

/**
 * Unary calls into the service implementations in the same process, through the interceptor list,
 * for the REST transcoder: what Connect's router does for a unary call once it has decoded the
 * request (run the interceptors around the implementation, with a handler context carrying the call's
 * headers and context values), minus the wire. Going through `createRouterTransport` instead cost a
 * binary encode and decode of the request and of the response, a Connect envelope, async iterables and
 * three abort signals per call: about half of a REST call's CPU time.
 */

/** One call: the decoded request message and what the handler context needs. */
export interface UnaryCall {
  method: DescMethodUnary;
  message: MessageShape<DescMethodUnary["input"]>;
  header: Headers;
  contextValues: ContextValues;
  /**
   * The call's signal, aborted when the client goes away; asked for only when something reads
   * `req.signal` or `ctx.signal` (no handler of this service does), as creating one per call is not free.
   */
  signal: () => AbortSignal;
  /** The URL the request arrived on. */
  url: string;
  /** What handlers see as `ctx.protocolName`: `rest` unless given (the gRPC fast path says `grpc`). */
  protocolName?: string;
  /** The HTTP method the request arrived with; `POST` (every RPC's) unless given. */
  requestMethod?: string;
}

/** Runs one unary call through the interceptors and the implementation; rejects as they throw. */
export type UnaryInvoker = (call: UnaryCall) => Promise<UnaryResponse>;

/** `ctx.protocolName` of a call made through an {@link UnaryInvoker}, carried from the call to its context. */
const kProtocolName = createContextKey("rest", { description: "protocol name of an in-process call" });

/**
 * An invoker for the unary methods that `routes` registers, wrapped by `interceptors` (the first is
 * the outermost, as in Connect). Methods without an implementation fail as in Connect: Unimplemented.
 */
export function createUnaryInvoker(
  routes: (router: ConnectRouter) => void,
  interceptors: readonly Interceptor[],
): UnaryInvoker {
  const implementations = unaryImplementations(routes);
  let next = async (req: UnaryRequest): Promise<UnaryResponse> => {
    const spec = implementations.get(req.method);
    if (spec === undefined) throw new Error(`${req.method.parent.typeName}.${req.method.name} is not routed`);
    const context = new InProcessContext(req);
    const output = await spec.impl(req.message, context);
    return {
      stream: false,
      service: req.service,
      method: req.method,
      header: context.responseHeader,
      trailer: context.responseTrailer,
      message: isMessage(output, req.method.output) ? output : create(req.method.output, output),
    };
  };
  for (const interceptor of [...interceptors].reverse()) next = interceptor(next as never) as typeof next;
  return (call) => {
    if (call.protocolName !== undefined) call.contextValues.set(kProtocolName, call.protocolName);
    return next(new InProcessRequest(call));
  };
}

/** What a call of a route beside the API answers, and the response headers the chain gave it. */
export interface RouteAnswer<T> {
  result: T;
  header: Headers;
}

/**
 * Runs one call of a route beside the API (the operator API, the key log's reads) through the
 * interceptors: `call.method` is its method of `src/rpc/route-services.ts` (its message
 * `google.protobuf.Empty`), and `run`, the route's own work, takes the place of the implementation.
 */
export type RouteInvoker = <T>(
  call: Omit<UnaryCall, "message">,
  run: () => Promise<T>,
) => Promise<RouteAnswer<T>>;

/** The route's own work of a call and, once it has run, its result: carried to the innermost step. */
interface RouteWork {
  run: () => Promise<unknown>;
  result: unknown;
}

/** Where a call of a route beside the API carries its {@link RouteWork} through the interceptors. */
const kRouteWork = createContextKey<RouteWork | undefined>(undefined, { description: "route work" });

/**
 * A {@link RouteInvoker} through `interceptors` (the first is the outermost, as in Connect). The chain
 * is wrapped once, like {@link createUnaryInvoker}'s, and each call's work rides in its context values:
 * wrapping it for every call made each interceptor's closures, and a fresh chain of them, per request.
 */
export function createRouteInvoker(interceptors: readonly Interceptor[]): RouteInvoker {
  let next = async (req: UnaryRequest): Promise<UnaryResponse> => {
    const work = req.contextValues.get(kRouteWork);
    if (work === undefined) throw new Error(`${req.method.name}: a route call without its work`);
    work.result = await work.run();
    return {
      stream: false,
      service: req.service,
      method: req.method,
      header: new CallHeaders(),
      trailer: new CallHeaders(),
      message: emptyOf(req.method.output),
    };
  };
  for (const interceptor of [...interceptors].reverse()) next = interceptor(next as never) as typeof next;
  return async <T>(call: Omit<UnaryCall, "message">, run: () => Promise<T>) => {
    const work: RouteWork = { run, result: undefined };
    call.contextValues.set(kRouteWork, work);
    const res = await next(new InProcessRequest({ ...call, message: emptyOf(call.method.input) }));
    return { result: work.result as T, header: res.header };
  };
}

/**
 * The one message of each route method's request and response type (`google.protobuf.Empty`, which
 * has no field to change), made once rather than per call.
 */
const empties = new Map<DescMethodUnary["input"], MessageShape<DescMethodUnary["input"]>>();

function emptyOf(schema: DescMethodUnary["input"]): MessageShape<DescMethodUnary["input"]> {
  let message = empties.get(schema);
  if (message === undefined) {
    message = create(schema);
    empties.set(schema, message);
  }
  return message;
}

/*
 * The request and the handler context of a call are class instances, never object literals with a
 * `get signal()`: V8 allocates the accessor pair of a literal's getter in the old generation, where it
 * points at the getter's closure and so at the whole call (request, reply, message, headers). Every
 * call's objects then survived young-generation collections, were promoted, and waited for a full
 * collection; the getters on these prototypes are shared and allocate nothing per call. (So an
 * interceptor that passes on a copy of the request must copy `signal` by name: a spread leaves a
 * prototype's getter behind. None of ours copies requests.)
 */

/** The `UnaryRequest` the interceptors see for an in-process call. */
class InProcessRequest implements UnaryRequest {
  readonly stream = false;
  readonly service: DescService;
  readonly method: DescMethodUnary;
  readonly requestMethod: string;
  readonly url: string;
  readonly header: Headers;
  readonly contextValues: ContextValues;
  readonly message: MessageShape<DescMethodUnary["input"]>;
  readonly #call: UnaryCall;

  constructor(call: UnaryCall) {
    this.service = call.method.parent;
    this.method = call.method;
    this.url = call.url;
    this.requestMethod = call.requestMethod ?? "POST";
    this.header = call.header;
    this.contextValues = call.contextValues;
    this.message = call.message;
    this.#call = call;
  }

  get signal(): AbortSignal {
    return this.#call.signal();
  }
}

/** The `HandlerContext` an implementation sees for an in-process call. */
class InProcessContext implements HandlerContext {
  readonly service: DescService;
  readonly method: DescMethodUnary;
  readonly requestMethod: string;
  readonly requestHeader: Headers;
  readonly responseHeader = new CallHeaders();
  readonly responseTrailer = new CallHeaders();
  readonly protocolName: string;
  readonly values: ContextValues;
  readonly url: string;
  readonly #request: UnaryRequest;

  constructor(req: UnaryRequest) {
    this.service = req.service;
    this.method = req.method;
    this.requestMethod = req.requestMethod;
    this.requestHeader = req.header;
    this.protocolName = req.contextValues.get(kProtocolName);
    this.values = req.contextValues;
    this.url = req.url;
    this.#request = req;
  }

  get signal(): AbortSignal {
    return this.#request.signal;
  }

  /** In-process calls carry no deadline. */
  timeoutMs(): number | undefined {
    return undefined;
  }
}

type UnarySpec = Extract<MethodImplSpec, { kind: "unary" }>;

/** Records what `routes` registers, keeping the unary implementations by method. */
function unaryImplementations(routes: (router: ConnectRouter) => void): Map<DescMethodUnary, UnarySpec> {
  const found = new Map<DescMethodUnary, UnarySpec>();
  const keep = (spec: MethodImplSpec) => {
    if (spec.kind === "unary") found.set(spec.method, spec);
  };
  const recorder = {
    handlers: [],
    service(service: DescService, implementation: object) {
      for (const spec of Object.values(createServiceImplSpec(service, implementation).methods)) keep(spec);
      return recorder;
    },
    rpc(
      method: Parameters<typeof createMethodImplSpec>[0],
      implementation: Parameters<typeof createMethodImplSpec>[1],
    ) {
      keep(createMethodImplSpec(method, implementation));
      return recorder;
    },
  };
  routes(recorder as unknown as ConnectRouter);
  return found;
}
