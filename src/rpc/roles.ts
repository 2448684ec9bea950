import type { DescMethod } from "@bufbuild/protobuf";
import { EventsService } from "../../gen/receipts/v1/events_pb.js";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { OnboardingService } from "../../gen/receipts/v1/onboarding_pb.js";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { WebhooksService } from "../../gen/receipts/v1/webhooks_pb.js";
import type { Role } from "../store/types.js";

/**
 * Which API key roles may call each RPC. A method not listed here is `public` (no key:
 * health checks); a new RPC must be added here or it is not reachable with a key at all, which fails
 * safe. `test/unit/roles.test.ts` holds every method's roles written out by hand, and checks them.
 */
const TABLE: Array<[DescMethod, Role[]]> = [
  [OnboardingService.method.generateKeys, ["issuer"]],
  [OnboardingService.method.register, ["issuer"]],
  [OnboardingService.method.deleteUser, ["issuer"]],
  [KeysService.method.grantAccess, ["issuer"]],
  [KeysService.method.lookupKey, ["merchant"]],
  [KeysService.method.registerEscrowKey, ["issuer"]],
  [KeysService.method.listEscrowKeys, ["issuer"]],
  [KeysService.method.revokeEscrowKey, ["issuer"]],
  [KeysService.method.listAuditEvents, ["issuer"]],
  [KeysService.method.listKtEntries, ["issuer"]],
  [KeysService.method.ktSelfCheck, ["issuer"]],
  [ReceiptsService.method.encryptReceipt, ["merchant"]],
  [ReceiptsService.method.decryptReceipt, ["issuer"]],
  [ReceiptsService.method.listReceipts, ["issuer"]],
  [ReceiptsService.method.getTransactionReceipt, ["merchant"]],
  [ReceiptsService.method.registerSigningKey, ["merchant"]],
  [ReceiptsService.method.storeSealedReceipt, ["merchant"]],
  [ReceiptsService.method.listPendingEscrow, ["issuer"]],
  [ReceiptsService.method.releaseEscrow, ["issuer"]],
  // Issuers read any merchantId's keys (for the cardholder's app); a merchant its own.
  [ReceiptsService.method.listSigningKeys, ["issuer", "merchant"]],
  [ReceiptsService.method.revokeSigningKey, ["merchant"]],
  [PaymentsService.method.createPayment, ["merchant"]],
  [PaymentsService.method.decryptPayment, ["issuer"]],
  [PaymentsService.method.getPayment, ["merchant"]],
  [PaymentsService.method.listPayments, ["merchant"]],
  [PaymentsService.method.refundPayment, ["merchant"]],
  // Events reach every tenant: each call sees its own tenant's endpoints and events only.
  [WebhooksService.method.createWebhookEndpoint, ["issuer", "merchant"]],
  [WebhooksService.method.listWebhookEndpoints, ["issuer", "merchant"]],
  [WebhooksService.method.deleteWebhookEndpoint, ["issuer", "merchant"]],
  [WebhooksService.method.rotateWebhookSecret, ["issuer", "merchant"]],
  [WebhooksService.method.listWebhookDeliveries, ["issuer", "merchant"]],
  [WebhooksService.method.replayWebhookEvent, ["issuer", "merchant"]],
  [EventsService.method.listEvents, ["issuer", "merchant"]],
  [EventsService.method.watchEvents, ["issuer", "merchant"]],
];

/**
 * The table by method key. Typed rather than `as const`: StrykerJS leaves `as const` literals
 * unmutated, and this table is the one place a role is granted (test/unit/roles.test.ts).
 */
const ROLES = new Map<string, readonly Role[]>(TABLE.map(([method, roles]) => [methodKey(method), roles]));

function methodKey(method: DescMethod): string {
  return `${method.parent.typeName}/${method.name}`;
}

/** The services whose methods need an API key. */
export const API_SERVICES = [
  OnboardingService,
  KeysService,
  ReceiptsService,
  PaymentsService,
  WebhooksService,
  EventsService,
] as const;

/** The roles allowed to call `method`, `"public"` for key-exempt methods, or `[]` for unknown ones. */
export function rolesFor(method: DescMethod): readonly Role[] | "public" {
  const roles = ROLES.get(methodKey(method));
  if (roles) return roles;
  return API_SERVICES.some((s) => s.typeName === method.parent.typeName) ? [] : "public";
}
