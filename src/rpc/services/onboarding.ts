import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { OnboardingService } from "../../../gen/receipts/v1/onboarding_pb.js";
import type { DomainDeps } from "../../domain/deps.js";
import { deleteUser } from "../../domain/erasure.js";
import { generateKeys, register } from "../../domain/onboarding.js";
import { callerOf, principalOf } from "../convert.js";

/** OnboardingService: key pairs, registration and erasure, adapted to the domain. */
export function onboardingService(deps: DomainDeps): ServiceImpl<typeof OnboardingService> {
  return {
    generateKeys: (req, ctx) => generateKeys(deps, principalOf(ctx), req),
    async register(req, ctx) {
      const registration = await register(deps, principalOf(ctx), req, callerOf(ctx));
      return { ...registration, registeredAt: timestampFromDate(registration.registeredAt) };
    },
    deleteUser: (req, ctx) => deleteUser(deps, principalOf(ctx), req, callerOf(ctx)),
  };
}
