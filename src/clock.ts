/** A source of the current time, injected so that expiry and rate limits are tested without sleeping. */
export interface Clock {
  now(): Date;
}

/** The real clock. */
export const systemClock: Clock = { now: () => new Date() };

/** A clock that only moves when told to; for tests. */
export class FakeClock implements Clock {
  private ms: number;

  constructor(start: Date | string = "2026-01-01T00:00:00Z") {
    this.ms = new Date(start).getTime();
  }

  now(): Date {
    return new Date(this.ms);
  }

  /** Moves the clock forward by `ms` milliseconds. */
  advance(ms: number): void {
    this.ms += ms;
  }
}
