import {
  AUDIT_PAGE_MAX,
  type AuditEvent,
  type AuditPage,
  type AuditQuery,
  type AuditStore,
  auditCursorOf,
  auditSeqOf,
} from "../types.js";
import { copy } from "./copy.js";

/**
 * The audit log held in memory, in append order: an event's number is its position plus one, and an
 * append is one synchronous push, so every event before it is there when it is.
 */
export class MemoryAudit implements AuditStore {
  private readonly events: AuditEvent[] = [];

  async append(event: AuditEvent): Promise<void> {
    this.events.push(auditCopy(event));
  }

  /** Newest first by `at`; events with the same time, the last appended first. */
  async list(limit: number, query: AuditQuery = {}): Promise<AuditEvent[]> {
    const { tenantId, after } = query;
    const newestFirst = this.events
      .map((event, index) => ({ event, index }))
      .filter(
        ({ event }) =>
          (tenantId === undefined || event.tenantId === tenantId) &&
          (after === undefined || event.at.getTime() > after.getTime()),
      )
      .sort((a, b) => b.event.at.getTime() - a.event.at.getTime() || b.index - a.index);
    return copy(newestFirst.slice(0, Math.max(0, limit)).map((entry) => entry.event));
  }

  async page(query: AuditQuery, limit: number, cursor?: string): Promise<AuditPage> {
    const max = Math.min(Math.max(1, limit), AUDIT_PAGE_MAX);
    let index =
      cursor === undefined ? this.startAfter(query.after) : Math.min(auditSeqOf(cursor), this.events.length);
    const events: AuditEvent[] = [];
    for (; index < this.events.length && events.length < max; index++) {
      const event = this.events[index] as AuditEvent;
      if (query.tenantId === undefined || event.tenantId === query.tenantId) events.push(event);
    }
    return { events: copy(events), cursor: auditCursorOf(index) };
  }

  /** The position of the first event written after `after` (all of them when absent). */
  private startAfter(after: Date | undefined): number {
    if (after === undefined) return 0;
    const index = this.events.findIndex((event) => event.at.getTime() > after.getTime());
    return index === -1 ? this.events.length : index;
  }
}

/**
 * A copy of an audit event sharing nothing with it (its one object member is its date): what the
 * generic deep copy (`copy.ts`) gives, without walking every member. Every look-up, decrypt and grant
 * appends one. test/store/memory-record-copies.test.ts holds it to the generic copy.
 */
export function auditCopy(event: AuditEvent): AuditEvent {
  return { ...event, at: new Date(event.at.getTime()) };
}
