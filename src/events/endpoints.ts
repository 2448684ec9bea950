import { EVENT_TYPES, eventTypesFor, isEventType } from "../domain/event-types.js";
import { checkText } from "../domain/field-rules.js";
import type { CallerInfo } from "../domain/grants.js";
import { AppError, Violations } from "../errors.js";
import { randomId } from "../ids.js";
import type {
  DeliveryPage,
  DeliveryRecord,
  SealedSecret,
  SealedSigningKey,
  WebhookEndpointRecord,
} from "../store/event-types.js";
import type { ApiKeyRecord } from "../store/types.js";
import { allowsPrivateReceivers, type EventsDeps } from "./deps.js";
import { newSecret, newSigningKey } from "./signing.js";
import { checkWebhookUrl, hostOf, isPublicAddress } from "./ssrf.js";

/**
 * Webhook endpoints of a tenant (docs/events.md): create (the secret shown once), list, delete, rotate the
 * secret (the previous one signs beside the new for {@link ROTATION_OVERLAP_MS}), the delivery log and
 * replay. Every call works on the caller's own tenant only: another tenant's endpoint is `not_found`.
 */

/** How long a previous secret or signing key keeps signing after a rotation: 24 hours. */
export const ROTATION_OVERLAP_MS = 86_400_000;

/** The longest description. */
export const MAX_DESCRIPTION_LENGTH = 256;

/** Default and largest page of the delivery log. */
export const DELIVERY_PAGE = { default: 50, max: 200 } as const;

/** How long creating an endpoint waits for its host name to resolve (a courtesy check only). */
const CREATE_RESOLVE_MS = 2_000;

/** An endpoint as created or rotated: the record, and the secret in the clear, shown this once. */
export interface EndpointWithSecret {
  endpoint: WebhookEndpointRecord;
  secret: string;
}

/** A create request after transport decoding. */
export interface CreateEndpointInput {
  url: string;
  events: readonly string[];
  description: string;
}

/**
 * Creates an endpoint: checks the URL (the SSRF rules: outside development https only, and
 * an IP literal or a name that resolves now must be public; the same check runs again at every
 * connection), makes its secret and Ed25519 key, and stores both sealed.
 */
export async function createEndpoint(
  deps: EventsDeps,
  principal: ApiKeyRecord,
  input: CreateEndpointInput,
  caller: CallerInfo,
): Promise<EndpointWithSecret> {
  const v = new Violations();
  const events = checkEventTypes(v, principal, input.events);
  checkText(v, "description", input.description, MAX_DESCRIPTION_LENGTH);
  const check = checkWebhookUrl(input.url, allowsPrivateReceivers(deps));
  if (input.url === "") v.add("url", "is required");
  else if (!check.ok) v.add("url", check.reason);
  else if (!(await resolvesPublic(deps, check.url))) {
    v.add("url", "resolves to a loopback, private, link-local or reserved address");
  }
  v.throwIfAny();

  const now = deps.clock.now();
  const endpointId = randomId("we", 12);
  const secret = newSecret();
  const key = newSigningKey();
  const endpoint: WebhookEndpointRecord = {
    endpointId,
    tenantId: principal.tenantId,
    role: principal.role,
    // As the URL parser writes it: host lower-cased, IPv4 in dotted form, default port dropped.
    url: check.ok ? check.url.href : input.url,
    events,
    description: input.description,
    status: "active",
    secrets: [{ sealed: deps.box.seal(secret, secretContext(endpointId)), createdAt: now }],
    signingKeys: [
      {
        publicKey: key.publicKey,
        sealedPrivateKey: deps.box.seal(key.privateKey, keyContext(endpointId)),
        createdAt: now,
      },
    ],
    createdAt: now,
    updatedAt: now,
  };
  if (!(await deps.store.webhookEndpoints.insert(endpoint, deps.config.maxEndpointsPerTenant))) {
    throw new AppError(
      "invalid_request",
      `A tenant may have at most ${deps.config.maxEndpointsPerTenant} webhook endpoints: delete one first.`,
    );
  }
  await audit(deps, principal, caller, "webhook.endpoint_created", endpointId);
  return { endpoint, secret };
}

/** The event types asked for: each known and sent to the caller's role, or `*` alone. */
function checkEventTypes(v: Violations, principal: ApiKeyRecord, events: readonly string[]): string[] {
  if (events.length === 0) {
    v.add("events", "must name at least one event type, or *");
    return [];
  }
  if (events.includes("*")) {
    if (events.length > 1) v.add("events", "* stands alone: it means every type");
    return ["*"];
  }
  const allowed = eventTypesFor(principal.role);
  events.forEach((type, i) => {
    if (!isEventType(type)) v.add(`events[${i}]`, `is not an event type (${allowed.join(", ")})`);
    else if (EVENT_TYPES[type].role !== principal.role) {
      v.add(`events[${i}]`, `is not sent to ${principal.role} tenants (${allowed.join(", ")})`);
    }
  });
  if (new Set(events).size !== events.length) v.add("events", "must not repeat a type");
  return [...events];
}

/**
 * Whether the URL's host resolves to public addresses only, now. A courtesy: the guard that matters runs
 * at every connection. A name that does not resolve (yet) is accepted; development skips the check.
 */
async function resolvesPublic(deps: EventsDeps, url: URL): Promise<boolean> {
  if (allowsPrivateReceivers(deps) || deps.resolve === undefined) return true;
  const resolve = deps.resolve;
  const addresses = await new Promise<string[]>((done) => {
    const timer = setTimeout(() => done([]), CREATE_RESOLVE_MS);
    resolve(hostOf(url), (err, found) => {
      clearTimeout(timer);
      done(err === null ? found.map((a) => a.address) : []);
    });
  });
  return addresses.every(isPublicAddress);
}

/** The tenant's endpoints, oldest first. */
export function listEndpoints(deps: EventsDeps, principal: ApiKeyRecord): Promise<WebhookEndpointRecord[]> {
  return deps.store.webhookEndpoints.listForTenant(principal.tenantId);
}

/** Deletes one of the tenant's endpoints and its deliveries: nothing more is sent to it. */
export async function deleteEndpoint(
  deps: EventsDeps,
  principal: ApiKeyRecord,
  input: { endpointId: string },
  caller: CallerInfo,
): Promise<void> {
  const endpoint = await ownEndpoint(deps, principal, input.endpointId);
  await deps.store.webhookEndpoints.delete(endpoint.endpointId);
  await deps.store.deliveries.deleteForEndpoint(endpoint.endpointId);
  await audit(deps, principal, caller, "webhook.endpoint_deleted", endpoint.endpointId);
}

/**
 * Makes a new secret (and, when asked, a new signing key); the current one keeps signing beside it for
 * 24 hours, and one already past its time is dropped.
 */
export async function rotateSecret(
  deps: EventsDeps,
  principal: ApiKeyRecord,
  input: { endpointId: string; rotateSigningKey: boolean },
  caller: CallerInfo,
): Promise<EndpointWithSecret> {
  const endpoint = await ownEndpoint(deps, principal, input.endpointId);
  const now = deps.clock.now();
  const until = new Date(now.getTime() + ROTATION_OVERLAP_MS);
  const secret = newSecret();
  const current = endpoint.secrets[0];
  const secrets: SealedSecret[] = [
    { sealed: deps.box.seal(secret, secretContext(endpoint.endpointId)), createdAt: now },
    ...(current === undefined ? [] : [{ ...current, expiresAt: until }]),
  ];
  let signingKeys = endpoint.signingKeys.filter((k) => k.expiresAt === undefined || k.expiresAt > now);
  if (input.rotateSigningKey) {
    const key = newSigningKey();
    const fresh: SealedSigningKey = {
      publicKey: key.publicKey,
      sealedPrivateKey: deps.box.seal(key.privateKey, keyContext(endpoint.endpointId)),
      createdAt: now,
    };
    const previous = signingKeys[0];
    signingKeys = [fresh, ...(previous === undefined ? [] : [{ ...previous, expiresAt: until }])];
  }
  // Only over the secret read above: of two rotations at once, the later write must not drop the
  // secret the earlier one answered (its caller would hold a secret that never signs).
  const updated = await deps.store.webhookEndpoints.replaceKeys(
    endpoint.endpointId,
    { secrets, signingKeys },
    now,
    current?.sealed,
  );
  if (updated === undefined) {
    if ((await deps.store.webhookEndpoints.find(endpoint.endpointId)) === undefined)
      throw new AppError("not_found", "Webhook endpoint not found.");
    throw new AppError("conflict", "The endpoint's secret was rotated meanwhile: rotate again if needed.");
  }
  await audit(
    deps,
    principal,
    caller,
    "webhook.secret_rotated",
    `${endpoint.endpointId}${input.rotateSigningKey ? " (and signing key)" : ""}`,
  );
  return { endpoint: updated, secret };
}

/** An endpoint's delivery log, newest event first. */
export async function listDeliveries(
  deps: EventsDeps,
  principal: ApiKeyRecord,
  input: { endpointId: string; pageSize: number; pageToken: string },
): Promise<DeliveryPage> {
  const v = new Violations();
  if (input.endpointId === "") v.add("endpointId", "is required");
  if (input.pageSize < 0 || input.pageSize > DELIVERY_PAGE.max) {
    v.add("pageSize", `must be from 1 to ${DELIVERY_PAGE.max}`);
  }
  if (input.pageToken.length > 512) v.add("pageToken", "is not a valid page token");
  v.throwIfAny();
  const endpoint = await ownEndpoint(deps, principal, input.endpointId);
  return deps.store.deliveries.listForEndpoint(
    endpoint.endpointId,
    input.pageSize || DELIVERY_PAGE.default,
    input.pageToken || undefined,
  );
}

/**
 * Sends one of the tenant's events to one of its active endpoints again, now, whether or not the
 * endpoint subscribes to its type; the `webhook-id` stays the event's id.
 */
export async function replayEvent(
  deps: EventsDeps,
  principal: ApiKeyRecord,
  input: { endpointId: string; eventId: string },
  caller: CallerInfo,
): Promise<DeliveryRecord> {
  const v = new Violations();
  if (input.eventId === "") v.add("eventId", "is required");
  v.throwIfAny();
  const endpoint = await ownEndpoint(deps, principal, input.endpointId);
  if (endpoint.status !== "active") {
    throw new AppError("invalid_request", "The endpoint is disabled: create a new one to receive events.");
  }
  const event = await deps.store.events.findForTenant(principal.tenantId, input.eventId);
  if (event === undefined) throw new AppError("not_found", "Event not found.");
  const now = deps.clock.now();
  const delivery = await deps.store.deliveries.replay(
    {
      endpointId: endpoint.endpointId,
      eventId: event.id,
      tenantId: event.tenantId,
      eventType: event.type,
      eventSeq: event.seq,
      status: "pending",
      attempts: 0,
      createdAt: now,
      nextAttemptAt: now,
      log: [],
      fence: 0,
    },
    now,
  );
  await audit(deps, principal, caller, "webhook.event_replayed", `${endpoint.endpointId} ${event.id}`);
  deps.hub.written();
  return delivery;
}

/** The caller's tenant's endpoint, or `not_found` (another tenant's too). */
async function ownEndpoint(
  deps: EventsDeps,
  principal: ApiKeyRecord,
  endpointId: string,
): Promise<WebhookEndpointRecord> {
  if (endpointId === "") {
    const v = new Violations();
    v.add("endpointId", "is required");
    v.throwIfAny();
  }
  const endpoint = await deps.store.webhookEndpoints.find(endpointId);
  if (endpoint === undefined || endpoint.tenantId !== principal.tenantId) {
    throw new AppError("not_found", "Webhook endpoint not found.");
  }
  return endpoint;
}

/** The additional data under which an endpoint's secrets are sealed. */
export function secretContext(endpointId: string): string {
  return `whsec:${endpointId}`;
}

/** The additional data under which an endpoint's signing private keys are sealed. */
export function keyContext(endpointId: string): string {
  return `whsk:${endpointId}`;
}

/** Audits an endpoint change under the caller's tenant (never a secret or a URL: a URL may hold a token). */
async function audit(
  deps: EventsDeps,
  principal: ApiKeyRecord,
  caller: CallerInfo,
  action: string,
  subject: string,
): Promise<void> {
  await deps.store.audit.append({
    at: deps.clock.now(),
    action,
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    subject,
  });
}
