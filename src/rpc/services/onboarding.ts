import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { OnboardingService } from "../../../gen/receipts/v1/onboarding_pb.js";
import type { DomainDeps } from "../../domain/deps.js";
import { generateKeys, register } from "../../domain/onboarding.js";
import { principalOf } from "../convert.js";

/** OnboardingService: key pairs and registration, adapted to the domain. */
export function onboardingService(deps: DomainDeps): ServiceImpl<typeof OnboardingService> {
  return {
    generateKeys: (_req, ctx) => generateKeys(deps, principalOf(ctx)),
    async register(req, ctx) {
      const registration = await register(deps, principalOf(ctx), req);
      return { ...registration, registeredAt: timestampFromDate(registration.registeredAt) };
    },
  };
}
