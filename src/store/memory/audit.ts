import type { AuditEvent, AuditQuery, AuditStore } from "../types.js";
import { copy } from "./copy.js";

/** The audit log held in memory, in append order. */
export class MemoryAudit implements AuditStore {
  private readonly events: AuditEvent[] = [];

  async append(event: AuditEvent): Promise<void> {
    this.events.push(copy(event));
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
}
