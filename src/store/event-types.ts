import type { Role } from "./types.js";

/**
 * The repository interfaces of events (docs/events.md) and of leases, beside `types.ts` (which holds
 * the rest of the contract): the outbox that other store operations write in the same atomic step as
 * their change, the feed it becomes, webhook endpoints, their deliveries, and the lease that lets
 * exactly one instance at a time sequence and deliver.
 *
 * Fencing. A lease holder can pause (a long GC, a stopped VM) past its lease, while another instance
 * takes over; when it wakes, it must not write over the new holder's work. Every write of the holder
 * carries its lease's fencing token, and the store refuses it once a larger token has written the same
 * thing: the sequencer's state keeps the largest token that used it, each delivery keeps the token of
 * the holder that last claimed it. A background job of another kind (a key-transparency sequencer) uses
 * the same lease and the same rule on its own documents.
 */

/** An event type; `EVENT_TYPES` (src/domain/event-types.ts) describes each. */
export type EventType =
  | "receipt.created"
  | "escrow.pending"
  | "escrow.released"
  | "key.changed"
  | "card.claim_conflict"
  | "user.erased"
  | "payment.created"
  | "payment.declined"
  | "payment.refunded";

/** The ids an event carries (which are set depends on its type). Never content, a hashed PAN or a PAR. */
export interface EventData {
  userId?: string;
  receiptId?: string;
  merchantId?: string;
  paymentId?: string;
  transactionId?: string;
  keyIdBefore?: string;
  keyIdAfter?: string;
  version?: number;
  escrowRef?: string;
  cardBin?: string;
  refundId?: string;
  createdAt?: Date;
}

/** One event, addressed to one tenant. */
export interface EventRecord {
  /** `evt_<random>`: the webhook-id, stable across retries and replays. */
  id: string;
  type: EventType;
  /** The only tenant that receives it (a change that concerns two tenants writes two events). */
  tenantId: string;
  /** When the change happened. */
  createdAt: Date;
  data: EventData;
}

/** An event in the feed: with its position, given by the sequencer after its change committed. */
export interface SequencedEvent extends EventRecord {
  /** Increasing in the order the events became visible; positions never appear out of order. */
  seq: number;
}

/** A fencing token's holder: a lease name and the token it was given. */
export interface Fence {
  lease: string;
  token: number;
}

/** The outcome of a fenced write made with a token that a newer holder has superseded. */
export const FENCED_OUT = "fenced_out" as const;

export interface EventStore {
  /**
   * Writes events on their own, for a change that writes nothing else (a declined payment). Other
   * operations take their events as an argument and write them in their own atomic step.
   */
  append(events: readonly EventRecord[]): Promise<void>;
  /**
   * Moves up to `limit` written events from the outbox into the feed, with the next positions, in one
   * atomic step per batch, fenced by `fence`: refused ({@link FENCED_OUT}, nothing changed) once a
   * larger token has sequenced. Returns the events sequenced, in position order ([] when none waited).
   * Events leave the outbox only into the feed, so none is lost or sequenced twice.
   */
  sequence(fence: Fence, limit: number): Promise<SequencedEvent[] | typeof FENCED_OUT>;
  /** A tenant's events after position `afterSeq`, in position order, at most `limit`. */
  listForTenant(tenantId: string, afterSeq: number, limit: number): Promise<SequencedEvent[]>;
  /** A tenant's sequenced event by id; undefined for another tenant's or an unknown id. */
  findForTenant(tenantId: string, eventId: string): Promise<SequencedEvent | undefined>;
  /** The largest position given so far, 0 before the first: where a watch from "now" starts. */
  lastSeq(): Promise<number>;
  /** Events of every tenant after position `afterSeq` (fan-out to endpoints), at most `limit`. */
  listAfter(afterSeq: number, limit: number): Promise<SequencedEvent[]>;
  /** The position up to which every event has its deliveries (0 at first). */
  fannedOut(): Promise<number>;
  /** Records that every event up to `seq` has its deliveries; fenced like {@link sequence}. */
  markFannedOut(fence: Fence, seq: number): Promise<boolean>;
  /** Deletes feed events created before `before` (retention); returns how many. */
  prune(before: Date): Promise<number>;
  /**
   * Calls `listener` after events were written through this store in this process, so the local
   * worker looks at once; writes of other processes are found by polling. Local: no I/O, so the
   * store's wrappers pass it through ({@link LOCAL_STORE_METHODS}).
   */
  onWritten(listener: () => void): void;
}

/**
 * Store methods that only touch this process (registering a listener): the wrappers that gate, time
 * and count store calls (startup, time limit) pass them through as they are, synchronous, so they
 * work before the store is ready and never become a rejected promise nobody awaits.
 */
export const LOCAL_STORE_METHODS: ReadonlySet<PropertyKey> = new Set(["onWritten"]);

/** An HMAC secret of an endpoint, sealed (AES-256-GCM under the configured key) and never stored in the clear. */
export interface SealedSecret {
  sealed: string;
  createdAt: Date;
  /** Set on a previous secret: it stops signing then. */
  expiresAt?: Date;
}

/** An Ed25519 signing key of an endpoint: its public key, and its private key sealed like a secret. */
export interface SealedSigningKey {
  /** `whpk_` + base64 of the 32 raw bytes. */
  publicKey: string;
  sealedPrivateKey: string;
  createdAt: Date;
  expiresAt?: Date;
}

export type EndpointStatus = "active" | "disabled";

/** A webhook endpoint of a tenant. */
export interface WebhookEndpointRecord {
  /** `we_<random>`. */
  endpointId: string;
  tenantId: string;
  /** The role of the API key that created it: `*` subscribes to every type sent to that role. */
  role: Role;
  url: string;
  /** Event types, or `["*"]`. */
  events: string[];
  description: string;
  status: EndpointStatus;
  /** The current secret first; a previous one (with `expiresAt`) after it during a rotation. */
  secrets: SealedSecret[];
  /** The current signing key first, as `secrets`. */
  signingKeys: SealedSigningKey[];
  createdAt: Date;
  updatedAt: Date;
  /** Set at the first failed attempt after a success (or since creation); cleared by a success. */
  failingSince?: Date;
  disabledAt?: Date;
  disabledReason?: string;
}

export interface WebhookEndpointStore {
  /** Stores a new endpoint unless the tenant already has `max`; returns whether it did. */
  insert(endpoint: WebhookEndpointRecord, max: number): Promise<boolean>;
  find(endpointId: string): Promise<WebhookEndpointRecord | undefined>;
  /** A tenant's endpoints, oldest first (then by id). */
  listForTenant(tenantId: string): Promise<WebhookEndpointRecord[]>;
  /**
   * Replaces the endpoint's secrets and keys if it exists and, when `readSecret` is given, its current
   * sealed secret is still that one (a rotation made meanwhile is not overwritten); returns the
   * endpoint after, or undefined.
   */
  replaceKeys(
    endpointId: string,
    keys: { secrets: SealedSecret[]; signingKeys: SealedSigningKey[] },
    now: Date,
    readSecret?: string,
  ): Promise<WebhookEndpointRecord | undefined>;
  /**
   * Records an attempt's outcome on the endpoint: a success clears `failingSince`; a failure sets it
   * when unset. Returns the endpoint after, or undefined when it is gone.
   */
  recordOutcome(endpointId: string, ok: boolean, at: Date): Promise<WebhookEndpointRecord | undefined>;
  /** Disables an active endpoint; returns whether this call disabled it. */
  disable(endpointId: string, reason: string, at: Date): Promise<boolean>;
  /** Deletes an endpoint; returns whether it existed. */
  delete(endpointId: string): Promise<boolean>;
}

export type DeliveryStatus = "pending" | "delivered" | "failed";

/** One attempt of a delivery, as the delivery log shows it. */
export interface DeliveryAttempt {
  at: Date;
  /** 0 when no HTTP answer came. */
  statusCode: number;
  /** "" on success. Never a response body. */
  error: string;
  durationMs: number;
}

/** How many attempts a delivery keeps in its log (the newest). */
export const DELIVERY_LOG_MAX = 20;

/** One event's delivery to one endpoint. */
export interface DeliveryRecord {
  endpointId: string;
  eventId: string;
  tenantId: string;
  eventType: EventType;
  /** The event's feed position (the order deliveries are made in). */
  eventSeq: number;
  status: DeliveryStatus;
  /** Attempts made since the delivery was created or last replayed. */
  attempts: number;
  createdAt: Date;
  /** Set while pending. */
  nextAttemptAt?: Date;
  deliveredAt?: Date;
  /** The newest attempts, oldest first, at most {@link DELIVERY_LOG_MAX}. */
  log: DeliveryAttempt[];
  /** The fencing token of the holder that last claimed it (0 until claimed). */
  fence: number;
}

/** What an attempt changes in a delivery. */
export interface DeliveryUpdate {
  attempt: DeliveryAttempt;
  status: DeliveryStatus;
  nextAttemptAt?: Date;
  deliveredAt?: Date;
}

/** Which delivery: an endpoint and an event's position (an event has one). */
export interface DeliveryKey {
  endpointId: string;
  eventSeq: number;
}

export interface DeliveryPage {
  deliveries: DeliveryRecord[];
  nextCursor?: string;
}

export interface DeliveryStore {
  /**
   * Creates the deliveries that do not exist yet (by endpoint and event) and leaves existing ones
   * alone, so a fan-out repeated after a crash creates nothing twice.
   */
  createMissing(deliveries: readonly DeliveryRecord[]): Promise<void>;
  /**
   * Pending deliveries due at `now`, earliest due first, at most `limit`; none of the tenants in
   * `exceptTenants` (the worker's fair share: tenants that hold slots already wait behind the others).
   */
  due(now: Date, limit: number, exceptTenants?: readonly string[]): Promise<DeliveryRecord[]>;
  /**
   * Claims a pending delivery for the holder of `fence` before an attempt: refused (false) when it is
   * no longer pending or a larger token claimed it. The claim moves `nextAttemptAt` to `until`, so a
   * crash during the attempt leaves it due again then.
   */
  claim(key: DeliveryKey, fence: Fence, until: Date): Promise<boolean>;
  /** Records an attempt of a claimed delivery: refused (false) when a larger token claimed it since. */
  record(key: DeliveryKey, fence: Fence, update: DeliveryUpdate): Promise<boolean>;
  /** Makes a delivery pending again now (creating it when missing) with a fresh attempt count; returns it. */
  replay(delivery: DeliveryRecord, now: Date): Promise<DeliveryRecord>;
  find(key: DeliveryKey): Promise<DeliveryRecord | undefined>;
  /** An endpoint's deliveries, newest event first, `limit` per page. */
  listForEndpoint(endpointId: string, limit: number, cursor?: string): Promise<DeliveryPage>;
  /** Marks every pending delivery of an endpoint failed (the endpoint was disabled); returns how many. */
  failPending(endpointId: string, at: Date, reason: string): Promise<number>;
  /** Deletes every delivery of an endpoint (deleted); returns how many. */
  deleteForEndpoint(endpointId: string): Promise<number>;
  /** Deletes deliveries created before `before` that are no longer pending (retention); returns how many. */
  prune(before: Date): Promise<number>;
}
