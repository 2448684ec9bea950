import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type {
  IssuerEscrowKeySchema,
  IssuerSigningKeySchema,
  KeysService,
} from "../../../gen/receipts/v1/keys_pb.js";
import { readTenantAudit } from "../../domain/audit.js";
import type { DomainDeps } from "../../domain/deps.js";
import { grantAccess } from "../../domain/grants.js";
import { listEscrowKeys, registerEscrowKey, revokeEscrowKey } from "../../domain/issuer-escrow.js";
import { listKtEntries } from "../../domain/kt/feed.js";
import {
  listIssuerSigningKeys,
  registerIssuerSigningKey,
  revokeIssuerSigningKey,
  type SigningKeyView,
} from "../../domain/kt/issuer-keys.js";
import { ktSelfCheck } from "../../domain/kt/self-check.js";
import { lookupKey } from "../../domain/routing.js";
import type { IssuerEscrowKeyRecord } from "../../store/types.js";
import { callerOf, lookupKeyResponseOf, principalOf } from "../convert.js";

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
    async lookupKey(req, ctx) {
      const key = await lookupKey(
        deps,
        principalOf(ctx),
        {
          recipientHashedPan: req.recipientHashedPan.toLowerCase(),
          recipientPar: req.recipientPar,
          cardBin: req.cardBin,
        },
        callerOf(ctx),
      );
      return lookupKeyResponseOf(key);
    },
    async registerEscrowKey(req, ctx) {
      const key = await registerEscrowKey(deps, principalOf(ctx), req, callerOf(ctx));
      return {
        escrowKeyId: key.escrowKeyId,
        algorithm: key.algorithm,
        createdAt: timestampFromDate(key.createdAt),
      };
    },
    async listEscrowKeys(_req, ctx) {
      const { keys, currentEscrowKeyId } = await listEscrowKeys(deps, principalOf(ctx));
      return { escrowKeys: keys.map((k) => escrowKeyOf(k, currentEscrowKeyId)), currentEscrowKeyId };
    },
    async revokeEscrowKey(req, ctx) {
      const { key, currentEscrowKeyId } = await revokeEscrowKey(deps, principalOf(ctx), req, callerOf(ctx));
      return { escrowKey: escrowKeyOf(key, currentEscrowKeyId), currentEscrowKeyId };
    },
    async registerIssuerSigningKey(req, ctx) {
      const key = await registerIssuerSigningKey(deps, principalOf(ctx), req, callerOf(ctx));
      const { signingKeyId, algorithm, status, role } = key;
      return { signingKeyId, algorithm, status, role, createdAt: timestampFromDate(key.createdAt) };
    },
    async listIssuerSigningKeys(_req, ctx) {
      const { signingKeys, requireBindings } = await listIssuerSigningKeys(deps, principalOf(ctx));
      return { signingKeys: signingKeys.map(signingKeyOf), requireBindings };
    },
    async revokeIssuerSigningKey(req, ctx) {
      const key = await revokeIssuerSigningKey(deps, principalOf(ctx), req, callerOf(ctx));
      return { signingKey: signingKeyOf(key) };
    },
    listKtEntries: (req, ctx) => listKtEntries(deps, principalOf(ctx), req),
    ktSelfCheck: (req, ctx) =>
      ktSelfCheck(deps, principalOf(ctx), {
        recipientHashedPan: req.recipientHashedPan.toLowerCase(),
        recipientPar: req.recipientPar,
        cardBin: req.cardBin,
      }),
    async listAuditEvents(req, ctx) {
      const page = await readTenantAudit(deps, principalOf(ctx).tenantId, req);
      return {
        events: page.events.map((event) => ({ ...event, at: timestampFromDate(event.at) })),
        nextPageToken: page.nextPageToken,
      };
    },
  };
}

/** An issuer signing key as the API renders it. */
function signingKeyOf(key: SigningKeyView): MessageInitShape<typeof IssuerSigningKeySchema> {
  return {
    signingKeyId: key.signingKeyId,
    algorithm: key.algorithm,
    publicKey: key.publicKey,
    role: key.role,
    status: key.status,
    createdAt: timestampFromDate(key.createdAt),
    ...(key.confirmedAt === undefined ? {} : { confirmedAt: timestampFromDate(key.confirmedAt) }),
    ...(key.revokedAt === undefined ? {} : { revokedAt: timestampFromDate(key.revokedAt) }),
  };
}

/** An issuer escrow key as the API renders it. */
function escrowKeyOf(
  key: IssuerEscrowKeyRecord,
  currentEscrowKeyId: string,
): MessageInitShape<typeof IssuerEscrowKeySchema> {
  return {
    escrowKeyId: key.escrowKeyId,
    algorithm: key.algorithm,
    publicKey: key.publicKey,
    createdAt: timestampFromDate(key.createdAt),
    ...(key.revokedAt === undefined ? {} : { revokedAt: timestampFromDate(key.revokedAt) }),
    current: key.escrowKeyId === currentEscrowKeyId,
  };
}
