import type { ClientSession } from "mongodb";
import {
  type EventRecord,
  type EventStore,
  FENCED_OUT,
  type Fence,
  type SequencedEvent,
} from "../event-types.js";
import { declareCollection } from "./collection.js";
import type { MongoContext } from "./connection.js";

/**
 * An event as stored in `events`: the outbox and the feed are one collection. Other operations insert
 * it with `pending: true` in their own transaction; the sequencer then gives it `seq` (and removes
 * `pending`) in a transaction of its own, after which the feed shows it.
 */
interface EventDoc extends EventRecord {
  _id: string;
  pending?: true;
  seq?: number;
}

/**
 * Events (docs/events.md): the outbox, written in the transaction of the change that causes each, and
 * the feed it becomes once the sequencer gives it a position (`seq`).
 */
export const EVENTS = declareCollection({
  name: "events",
  indexes: [
    // No two events share a position; only sequenced events have one.
    {
      key: { seq: 1 },
      name: "uniq_seq",
      unique: true,
      partialFilterExpression: { seq: { $exists: true } },
    },
    { key: { tenantId: 1, seq: 1 }, name: "listForTenant" },
    // The sequencer's scan of the outbox, oldest first.
    {
      key: { pending: 1, createdAt: 1, _id: 1 },
      name: "outbox",
      partialFilterExpression: { pending: true },
    },
    { key: { createdAt: 1 }, name: "prune" },
  ],
  shardKey: {
    key: "unsharded",
    why:
      "The outbox and the feed. Written in the change's transaction (on the primary shard: one shard more, " +
      "four for a payment), sequenced by one sequencer in one-shard transactions, so positions follow commit " +
      "order without a cluster-wide snapshot. Its size follows the event rate times the retention " +
      "(EVENTS_RETENTION_DAYS, default 7), not the receipts kept: about 80 million events, 25 GB, a week at " +
      "2 billion receipts a year with payments.",
  },
});

/** One document, the event sequencer's: the next position, the fan-out mark, the largest fencing token. */
export const EVENT_STATE = declareCollection({
  name: "eventState",
  indexes: [],
  shardKey: { key: "unsharded", why: "One document, read and written with events." },
});

/** The sequencer's state in `eventState`: the next position, the fan-out mark, the largest token. */
interface SequencerDoc {
  _id: string;
  next: number;
  fannedOut: number;
  fence: number;
}

const SEQUENCER = "sequencer";

/** The document of `event` as other operations insert it (in their transaction, through `session`). */
export function eventDocOf(event: EventRecord): EventDoc {
  return { ...event, _id: event.id, pending: true };
}

/**
 * Inserts `events` in the transaction of `session`: the outbox write of another operation, in the
 * same transaction as its change. Nothing to do for none.
 */
export async function insertEventsIn(
  ctx: MongoContext,
  session: ClientSession,
  events: readonly EventRecord[] | undefined,
): Promise<void> {
  if (events === undefined || events.length === 0) return;
  await ctx.collection<EventDoc>(EVENTS.name).insertMany(events.map(eventDocOf), ctx.writeIn(session));
}

/**
 * Tells this process's listeners (`EventStore.onWritten`) that events were written, after the
 * operation that wrote them committed. Nothing for none.
 */
export function announceEvents(ctx: MongoContext, events: readonly EventRecord[] | undefined): void {
  if (events !== undefined && events.length > 0) ctx.announceEvents();
}

/** The record of a stored event (without Mongo's fields). */
function sequencedOf(doc: EventDoc): SequencedEvent {
  const { _id, pending: _pending, seq, ...event } = doc;
  return { ...event, seq: seq ?? 0 };
}

/** Events in `events` (unsharded: see `EVENTS`), and the sequencer's state in `eventState`. */
export class MongoEvents implements EventStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [EVENTS, EVENT_STATE] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get events() {
    return this.ctx.collection<EventDoc>(EVENTS.name);
  }

  private get state() {
    return this.ctx.collection<SequencerDoc>(EVENT_STATE.name);
  }

  append(events: readonly EventRecord[]): Promise<void> {
    return this.ctx.run(async () => {
      if (events.length === 0) return;
      await this.events.insertMany(events.map(eventDocOf), this.ctx.limit);
      announceEvents(this.ctx, events);
    });
  }

  onWritten(listener: () => void): void {
    this.ctx.onEventsWritten(listener);
  }

  /**
   * One transaction: reads the state (refusing a smaller token than the last), gives the oldest pending
   * events the next positions, and writes the state back. Two sequencers conflict on the state
   * document, so positions are given in the order their transactions commit: a reader that sees a
   * position sees every smaller one.
   */
  sequence(fence: Fence, limit: number): Promise<SequencedEvent[] | typeof FENCED_OUT> {
    return this.ctx.run(() =>
      this.ctx.transaction("events.sequence", async (session) => {
        const read = this.ctx.readIn(session);
        const write = this.ctx.writeIn(session);
        const state = await this.state.findOne<SequencerDoc>({ _id: SEQUENCER }, read);
        if (state !== null && state.fence > fence.token) return FENCED_OUT;
        const pending = await this.events
          .find<EventDoc>({ pending: true }, { ...read, projection: {} })
          .sort({ createdAt: 1, _id: 1 })
          .limit(Math.max(1, limit))
          .toArray();
        let next = state?.next ?? 1;
        const done: SequencedEvent[] = [];
        for (const doc of pending) {
          const seq = next++;
          await this.events.updateOne(
            { _id: doc._id, pending: true },
            { $set: { seq }, $unset: { pending: "" } },
            write,
          );
          done.push(sequencedOf({ ...doc, seq }));
        }
        await this.state.updateOne(
          { _id: SEQUENCER },
          { $set: { next, fence: fence.token }, $setOnInsert: { fannedOut: 0 } },
          { ...write, upsert: true },
        );
        return done;
      }),
    );
  }

  listForTenant(tenantId: string, afterSeq: number, limit: number): Promise<SequencedEvent[]> {
    return this.findSequenced({ tenantId, seq: { $gt: afterSeq } }, limit);
  }

  findForTenant(tenantId: string, eventId: string): Promise<SequencedEvent | undefined> {
    return this.ctx.run(async () => {
      const doc = await this.events.findOne<EventDoc>(
        { _id: eventId, tenantId, seq: { $exists: true } },
        { ...this.ctx.limit, projection: {} },
      );
      return doc === null ? undefined : sequencedOf(doc);
    });
  }

  lastSeq(): Promise<number> {
    return this.ctx.run(async () => {
      const state = await this.state.findOne<SequencerDoc>({ _id: SEQUENCER }, this.ctx.read);
      return (state?.next ?? 1) - 1;
    });
  }

  listAfter(afterSeq: number, limit: number): Promise<SequencedEvent[]> {
    return this.findSequenced({ seq: { $gt: afterSeq } }, limit);
  }

  fannedOut(): Promise<number> {
    return this.ctx.run(async () => {
      const state = await this.state.findOne<SequencerDoc>({ _id: SEQUENCER }, this.ctx.read);
      return state?.fannedOut ?? 0;
    });
  }

  markFannedOut(fence: Fence, seq: number): Promise<boolean> {
    return this.ctx.run(async () => {
      const result = await this.state.updateOne(
        { _id: SEQUENCER, fence: { $lte: fence.token } },
        { $max: { fannedOut: seq }, $set: { fence: fence.token } },
        this.ctx.limit,
      );
      return result.matchedCount === 1;
    });
  }

  prune(before: Date): Promise<number> {
    return this.ctx.run(
      async () =>
        (await this.events.deleteMany({ seq: { $exists: true }, createdAt: { $lt: before } }, this.ctx.limit))
          .deletedCount,
    );
  }

  /** Sequenced events matching `filter`, in position order, at most `limit`. */
  private findSequenced(filter: Record<string, unknown>, limit: number): Promise<SequencedEvent[]> {
    return this.ctx.run(async () =>
      (
        await this.events
          .find<EventDoc>(filter, { ...this.ctx.limit, projection: {} })
          .sort({ seq: 1 })
          .limit(Math.max(1, limit))
          .toArray()
      ).map(sequencedOf),
    );
  }
}
