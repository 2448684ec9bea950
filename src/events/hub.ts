/**
 * In-process wake-ups for events: the worker sleeps until something was written (or its poll interval
 * passes), the streams until something was sequenced. Only a shortcut on one instance: every waiter
 * also wakes on its own timer and reads the store, so writes and sequencing on other instances are
 * seen within the poll interval.
 */
export class EventHub {
  private readonly writes = new Bell();
  private readonly sequencing = new Bell();

  /** Events were written in this process: wake the worker. */
  written(): void {
    this.writes.ring();
  }

  /** Events were sequenced in this process: wake the streams. */
  sequenced(): void {
    this.sequencing.ring();
  }

  /** Resolves at the next {@link written}, after `ms`, or when `signal` aborts, whichever is first. */
  untilWritten(ms: number, signal?: AbortSignal): Promise<void> {
    return this.writes.wait(ms, signal);
  }

  /** Resolves at the next {@link sequenced}, after `ms`, or when `signal` aborts, whichever is first. */
  untilSequenced(ms: number, signal?: AbortSignal): Promise<void> {
    return this.sequencing.wait(ms, signal);
  }
}

/** A wake-up many can wait for: each ring resolves every wait pending at that moment. */
export class Bell {
  private waiters = new Set<() => void>();

  ring(): void {
    // Rung for every write: with nobody waiting (the worker is busy, the usual case under load) it
    // costs nothing, not a new set per write.
    if (this.waiters.size === 0) return;
    const waiting = this.waiters;
    this.waiters = new Set();
    for (const wake of waiting) wake();
  }

  wait(ms: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted === true) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiters.add(done);
      signal?.addEventListener("abort", done, { once: true });
    });
  }
}
