import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { KeysService } from "../../../gen/receipts/v1/keys_pb.js";
import type { DomainDeps } from "../../domain/deps.js";
import { grantAccess } from "../../domain/grants.js";
import { callerOf, principalOf } from "../convert.js";

/** KeysService: decrypt grants, adapted to the domain. */
export function keysService(deps: DomainDeps): ServiceImpl<typeof KeysService> {
  return {
    async grantAccess(req, ctx) {
      const grant = await grantAccess(deps, principalOf(ctx), req, callerOf(ctx));
      return {
        ...grant,
        grantedAt: timestampFromDate(grant.grantedAt),
        expiresAt: timestampFromDate(grant.expiresAt),
      };
    },
  };
}
