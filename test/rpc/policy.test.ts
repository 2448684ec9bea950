import { create, type DescMethod, setExtension } from "@bufbuild/protobuf";
import { MethodOptionsSchema } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { MethodPolicySchema, Role as ProtoRole, policy } from "../../gen/receipts/v1/options_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { DEFAULT_EXTRAS, rpcName } from "../../src/openapi/extras.js";
import { API_SERVICES, accessOf, declaredPolicy, policyOf } from "../../src/rpc/policy.js";
import { KEY_LOG, OPERATOR } from "../../src/rpc/route-services.js";

/**
 * The policy every protocol applies comes from the `(receipts.v1.policy)` options in the protos. The
 * roles are checked method by method in roles.test.ts; here the other three decisions are written out
 * by hand (from the README: the creates that take an Idempotency-Key, the calls a merchant signs, the
 * generate-keys limit), so an option dropped or added in a proto fails this test.
 */
const IDEMPOTENT = [
  "ReceiptsService/EncryptReceipt",
  "ReceiptsService/StoreSealedReceipt",
  "PaymentsService/CreatePayment",
  "PaymentsService/RefundPayment",
];
const SIGNED = [
  "ReceiptsService/EncryptReceipt",
  "PaymentsService/CreatePayment",
  "PaymentsService/RefundPayment",
];
const KEY_GENERATION = ["OnboardingService/GenerateKeys"];

const methods = API_SERVICES.flatMap((service) => service.methods);
const NOBODY: ReturnType<typeof policyOf> = {
  roles: [],
  idempotent: false,
  signed: false,
  rateBucket: "all",
};
const nameOf = (method: DescMethod) => `${method.parent.name}/${method.name}`;

function withPolicy(test: (policy: Exclude<ReturnType<typeof policyOf>, "public">) => boolean): string[] {
  return methods
    .filter((method) => {
      const policy = policyOf(method);
      if (policy === "public") throw new Error(`${nameOf(method)} is public`);
      return test(policy);
    })
    .map(nameOf)
    .sort();
}

describe("the policy declared in the protos", () => {
  it("makes exactly the creates idempotent", () => {
    expect(withPolicy((p) => p.idempotent)).toEqual([...IDEMPOTENT].sort());
  });

  it("has merchants sign exactly the receipts they encrypt, pay and refund with", () => {
    expect(withPolicy((p) => p.signed)).toEqual([...SIGNED].sort());
  });

  it("counts generate-keys apart, and every other call against the general limit", () => {
    expect(withPolicy((p) => p.rateBucket === "keygen")).toEqual(KEY_GENERATION);
    expect(withPolicy((p) => p.rateBucket === "all")).toHaveLength(methods.length - KEY_GENERATION.length);
  });

  it("lets health checks through, and nobody into an API method it does not know", () => {
    expect(policyOf(Health.method.check)).toBe("public");
    const unknown = { ...ReceiptsService.method.encryptReceipt, name: "ExportEverything" } as DescMethod;
    expect(policyOf(unknown)).toEqual({ roles: [], idempotent: false, signed: false, rateBucket: "all" });
  });

  it("asks the operator token for the operator API, nothing but an address for the key log, an API key for the rest", () => {
    for (const method of Object.values(OPERATOR))
      expect([method.name, accessOf(method)]).toEqual([method.name, "operator"]);
    for (const method of Object.values(KEY_LOG))
      expect([method.name, accessOf(method)]).toEqual([method.name, "key-log"]);
    expect(accessOf(Health.method.check)).toBe("public");
    for (const service of API_SERVICES) {
      for (const method of service.methods)
        expect([method.name, accessOf(method)]).toEqual([method.name, "api-key"]);
    }
    // The service decides, not the name: an API method named like an operator or key-log method is the API's.
    for (const name of ["ListApiKeys", "ConfirmRoot", "GetCheckpoint"]) {
      const lookAlike = { ...ReceiptsService.method.encryptReceipt, name } as DescMethod;
      expect(accessOf(lookAlike)).toBe("api-key");
    }
  });

  it("answers each descriptor by its own service and name, asked in any order and again", () => {
    // policyOf remembers its answer per descriptor. Look-alikes (an API method's name under the health
    // service, an unknown name under the API's) must get their own answers, before and after the real one.
    const cases: [DescMethod, ReturnType<typeof policyOf>][] = [];
    for (const method of methods) {
      cases.push([method, declaredPolicy(method)]);
      cases.push([{ ...method, parent: Health } as DescMethod, "public"]);
      cases.push([{ ...method, name: `${method.name}Everything` } as DescMethod, NOBODY]);
    }
    cases.push([Health.method.check, "public"]);
    fc.assert(
      fc.property(fc.shuffledSubarray(cases, { minLength: 1 }), fc.nat(3), (asked, repeats) => {
        for (let round = 0; round <= repeats; round++)
          for (const [method, expected] of asked) expect(policyOf(method)).toEqual(expected);
      }),
    );
  });

  it("lets nobody in through a declared role that has no name (ROLE_UNSPECIFIED, or unknown here)", () => {
    // No proto of the API declares one, so a synthetic descriptor does: the encrypt method with its
    // option replaced. A role without a name must grant nothing, and must not show up as a role at all
    // (the OpenAPI document's x-roles lists these names).
    const base = ReceiptsService.method.encryptReceipt;
    const declaring = (roles: ProtoRole[]): DescMethod => {
      const options = create(MethodOptionsSchema);
      setExtension(options, policy, create(MethodPolicySchema, { roles, idempotent: true }));
      return { ...base, proto: { ...base.proto, options } } as DescMethod;
    };
    expect(declaredPolicy(declaring([ProtoRole.UNSPECIFIED]))).toEqual({
      roles: [],
      idempotent: true,
      signed: false,
      rateBucket: "all",
    });
    expect(declaredPolicy(declaring([ProtoRole.UNSPECIFIED, ProtoRole.MERCHANT])).roles).toEqual([
      "merchant",
    ]);
    expect(declaredPolicy(declaring([7 as ProtoRole, ProtoRole.ISSUER])).roles).toEqual(["issuer"]);
    // The real declaration read the same way gives the merchant role only.
    expect(declaredPolicy(base).roles).toEqual(["merchant"]);
  });

  it("documents the Idempotency-Key and X-Receipt-Signature headers where the policy reads them", () => {
    for (const method of methods) {
      const headers = (DEFAULT_EXTRAS.get(rpcName(method))?.headers ?? []).map((h) => h.name);
      expect({ method: nameOf(method), headers }).toEqual({
        method: nameOf(method),
        headers: [
          ...(IDEMPOTENT.includes(nameOf(method)) ? ["Idempotency-Key"] : []),
          ...(SIGNED.includes(nameOf(method)) ? ["X-Receipt-Signature"] : []),
        ],
      });
    }
  });
});
