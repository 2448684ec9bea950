import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  type WebhookEndpoint,
  WebhookEndpointSchema,
  type WebhooksService,
} from "../../../gen/receipts/v1/webhooks_pb.js";
import type { EventsDeps } from "../../events/deps.js";
import {
  createEndpoint,
  deleteEndpoint,
  listDeliveries,
  listEndpoints,
  replayEvent,
  rotateSecret,
} from "../../events/endpoints.js";
import { deliveryMessageOf } from "../../events/messages.js";
import { timestampOf } from "../../proto-scalars.js";
import type { WebhookEndpointRecord } from "../../store/event-types.js";
import { callerOf, principalOf } from "../convert.js";

/** WebhooksService: a tenant's webhook endpoints, its delivery log and replay, adapted to src/events. */
export function webhooksService(deps: EventsDeps): ServiceImpl<typeof WebhooksService> {
  const now = () => deps.clock.now();
  return {
    async createWebhookEndpoint(req, ctx) {
      const { endpoint, secret } = await createEndpoint(deps, principalOf(ctx), req, callerOf(ctx));
      return { endpoint: endpointMessageOf(endpoint, now(), secret) };
    },
    async listWebhookEndpoints(_req, ctx) {
      const endpoints = await listEndpoints(deps, principalOf(ctx));
      return { endpoints: endpoints.map((e) => endpointMessageOf(e, now())) };
    },
    async deleteWebhookEndpoint(req, ctx) {
      await deleteEndpoint(deps, principalOf(ctx), req, callerOf(ctx));
      return { endpointId: req.endpointId };
    },
    async rotateWebhookSecret(req, ctx) {
      const { endpoint, secret } = await rotateSecret(deps, principalOf(ctx), req, callerOf(ctx));
      return { endpoint: endpointMessageOf(endpoint, now(), secret) };
    },
    async listWebhookDeliveries(req, ctx) {
      const page = await listDeliveries(deps, principalOf(ctx), req);
      return { deliveries: page.deliveries.map(deliveryMessageOf), nextPageToken: page.nextCursor ?? "" };
    },
    async replayWebhookEvent(req, ctx) {
      return { delivery: deliveryMessageOf(await replayEvent(deps, principalOf(ctx), req, callerOf(ctx))) };
    },
  };
}

/**
 * An endpoint as the API shows it: never a sealed value; the secret only when just made; the public
 * keys and the previous secret's end as of `now`.
 */
function endpointMessageOf(e: WebhookEndpointRecord, now: Date, secret = ""): WebhookEndpoint {
  const live = <T extends { expiresAt?: Date }>(items: T[]) =>
    items.filter((i) => i.expiresAt === undefined || i.expiresAt > now);
  const previous = live(e.secrets).find((s) => s.expiresAt !== undefined);
  return create(WebhookEndpointSchema, {
    endpointId: e.endpointId,
    url: e.url,
    events: e.events,
    description: e.description,
    status: e.status,
    createdAt: timestampOf(e.createdAt),
    publicKeys: live(e.signingKeys).map((k) => k.publicKey),
    ...(secret === "" ? {} : { secret }),
    ...(previous?.expiresAt === undefined
      ? {}
      : { previousSecretExpiresAt: timestampOf(previous.expiresAt) }),
    ...(e.disabledAt === undefined ? {} : { disabledAt: timestampOf(e.disabledAt) }),
    ...(e.disabledReason === undefined ? {} : { disabledReason: e.disabledReason }),
  });
}
