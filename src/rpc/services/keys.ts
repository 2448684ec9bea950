import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { KeysService } from "../../../gen/receipts/v1/keys_pb.js";
import type { DomainDeps } from "../../domain/deps.js";
import { grantAccess } from "../../domain/grants.js";
import { registerEscrowKey } from "../../domain/issuer-escrow.js";
import { lookupKey } from "../../domain/routing.js";
import { callerOf, principalOf } from "../convert.js";

/** KeysService: decrypt grants, recipient key look-up and issuer escrow keys, adapted to the domain. */
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
    lookupKey: (req, ctx) =>
      lookupKey(
        deps,
        principalOf(ctx),
        { recipientHashedPan: req.recipientHashedPan.toLowerCase(), cardBin: req.cardBin },
        callerOf(ctx),
      ),
    async registerEscrowKey(req, ctx) {
      const key = await registerEscrowKey(deps, principalOf(ctx), req);
      return {
        escrowKeyId: key.escrowKeyId,
        algorithm: key.algorithm,
        createdAt: timestampFromDate(key.createdAt),
      };
    },
  };
}
