import { type DescMethod, getOption } from "@bufbuild/protobuf";
import { EventsService } from "../../gen/receipts/v1/events_pb.js";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { OnboardingService } from "../../gen/receipts/v1/onboarding_pb.js";
import { Role as ProtoRole, policy, RateBucket } from "../../gen/receipts/v1/options_pb.js";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { WebhooksService } from "../../gen/receipts/v1/webhooks_pb.js";
import type { Role } from "../store/types.js";
import { KeyLogReads, OperatorApi } from "./route-services.js";

/**
 * Each RPC's policy: the roles that may call it, whether it reads an `Idempotency-Key`, whether it
 * reads `X-Receipt-Signature`, and its rate-limit counter. Declared once, in the protos, as the
 * `(receipts.v1.policy)` method option (proto/receipts/v1/options.proto), and read from the generated
 * descriptors into one table here, which every protocol's calls (through the interceptors) and the
 * OpenAPI document ask. `test/rpc/roles.test.ts` holds every method's roles written out by hand and
 * checks them through the real access interceptor.
 */

/** The API's services, in the order of the README: every protocol serves these, and each needs a key. */
export const API_SERVICES = [
  OnboardingService,
  KeysService,
  ReceiptsService,
  PaymentsService,
  WebhooksService,
  EventsService,
] as const;

/** The rate-limit counter of a call: `keygen` (generate-keys, which costs CPU) or `all`. */
export type RateBucketName = "all" | "keygen";

/** The policy of one RPC of the API, as the service applies it. */
export interface MethodPolicy {
  /** The API key roles that may call it; empty: nobody. */
  readonly roles: readonly Role[];
  /** It reads `Idempotency-Key`: a retry with the same key gets the first answer. */
  readonly idempotent: boolean;
  /** It reads `X-Receipt-Signature`, the merchant's signature over the receipt. */
  readonly signed: boolean;
  readonly rateBucket: RateBucketName;
}

/** The policy of an RPC of the API with no (or an empty) declaration: reachable by nobody. */
const NOBODY: MethodPolicy = { roles: [], idempotent: false, signed: false, rateBucket: "all" };

const ROLE_NAMES: ReadonlyMap<ProtoRole, Role> = new Map<ProtoRole, Role>([
  [ProtoRole.ISSUER, "issuer"],
  [ProtoRole.MERCHANT, "merchant"],
]);

/**
 * The policy `method` declares in its `(receipts.v1.policy)` option. A declared role with no name
 * (ROLE_UNSPECIFIED, or a number this build does not know) lets nobody in. Exported for the test that
 * declares one on a synthetic descriptor: no proto of the API declares one.
 */
export function declaredPolicy(method: DescMethod): MethodPolicy {
  const declared = getOption(method, policy);
  const roles = declared.roles.flatMap((role) => {
    const name = ROLE_NAMES.get(role);
    return name === undefined ? [] : [name];
  });
  return {
    roles,
    idempotent: declared.idempotent,
    signed: declared.signed,
    rateBucket: declared.rateBucket === RateBucket.KEY_GENERATION ? "keygen" : "all",
  };
}

function methodKey(method: DescMethod): string {
  return `${method.parent.typeName}/${method.name}`;
}

/** The one policy table, by `package.Service/Method`, made from the descriptors once. */
const POLICIES: ReadonlyMap<string, MethodPolicy> = new Map(
  API_SERVICES.flatMap((service) => service.methods.map((m) => [methodKey(m), declaredPolicy(m)] as const)),
);

/** The services whose methods need an API key: the API's, and any other of its package (fails safe). */
function isKeyed(method: DescMethod): boolean {
  return method.parent.typeName.startsWith("receipts.v1.");
}

/**
 * The policy of `method`: `"public"` for the key-exempt methods (gRPC health and reflection), the
 * declared one for the API's methods, and one that lets nobody in for a method of the API's package
 * that is not in the table.
 */
export function policyOf(method: DescMethod): MethodPolicy | "public" {
  let known = policyByMethod.get(method);
  if (known === undefined) {
    known = POLICIES.get(methodKey(method)) ?? (isKeyed(method) ? NOBODY : "public");
    policyByMethod.set(method, known);
  }
  return known;
}

/**
 * {@link policyOf}'s answer for each method descriptor it was asked about. The chain asks twice per
 * call (access, then the policy), and building the `package.Service/Method` key and hashing it took
 * 1% of a REST look-up's main thread. The answer depends on the descriptor alone, which never changes.
 */
const policyByMethod = new WeakMap<DescMethod, MethodPolicy | "public">();

/** The roles allowed to call `method`, `"public"` for key-exempt methods, or `[]` for unknown ones. */
export function rolesFor(method: DescMethod): readonly Role[] | "public" {
  const found = policyOf(method);
  return found === "public" ? found : found.roles;
}

/**
 * How a call is let in, the first question of the chain's access step: `api-key` for the API's
 * methods (then the method's {@link policyOf}), `operator` for the operator API (the operator token,
 * counted per client address before it is read), `key-log` for the key log's public reads (anyone,
 * counted per client address), `public` for gRPC health and reflection.
 */
export type Access = "api-key" | "operator" | "key-log" | "public";

export function accessOf(method: DescMethod): Access {
  if (method.parent === OperatorApi) return "operator";
  if (method.parent === KeyLogReads) return "key-log";
  return policyOf(method) === "public" ? "public" : "api-key";
}
