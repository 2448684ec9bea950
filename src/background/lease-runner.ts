import type { Logger } from "pino";
import type { Clock } from "../clock.js";
import type { Lease, LeaseStore } from "../store/lease-types.js";

/**
 * Runs a background job on exactly one instance at a time: the holder of a store lease (`LeaseStore`).
 * Every instance runs a runner; the one that takes the lease runs the job, renews the lease at a third
 * of its lifetime, and stops the job (aborting its signal) as soon as a renewal shows the lease lost,
 * or when the lease would run out before another renewal could succeed (the store unreachable). The
 * others try to take it every third of the lifetime, so a dead holder's job moves on within one
 * lifetime and a bit. A holder that only paused (and so lost its lease without noticing at once) is
 * stopped by the fencing token: every write of the job carries `lease.token`, and the store refuses it
 * once a newer holder has written (see src/store/event-types.ts). The events worker uses it; a
 * key-transparency sequencer would run the same way under another name.
 */
export interface LeaseRunnerOptions {
  leases: LeaseStore;
  /** The lease's name, one per kind of job (`events`). */
  name: string;
  /** This instance, unique among instances (a random id per process). */
  holder: string;
  /** Lifetime of the lease; it must exceed the clock skew between instances by far. */
  ttlMs: number;
  clock: Clock;
  logger: Logger;
  /** How often an instance that does not hold the lease tries to take it; a third of `ttlMs` by default. */
  standbyMs?: number;
  /** The job: runs while the lease is held, and returns soon after `signal` aborts. */
  job: (lease: Lease, signal: AbortSignal) => Promise<void>;
}

export class LeaseRunner {
  /** Aborted by `stop()`; a `start()` after a stop begins with a fresh one. */
  private stopping = new AbortController();
  private running: Promise<void> | undefined;
  /** The lease this instance holds, as of its last take or renewal. */
  private held: Lease | undefined;

  constructor(private readonly options: LeaseRunnerOptions) {}

  /** Whether this instance holds the lease (as of its last take or renewal). */
  get holding(): boolean {
    return this.held !== undefined;
  }

  /**
   * Takes the lease, or renews it once a third of it has passed (the job loop renews on a timer
   * instead); undefined while another instance holds it.
   */
  async take(): Promise<Lease | undefined> {
    const { leases, name, holder, ttlMs, clock, logger } = this.options;
    const now = clock.now();
    const held = this.held;
    if (held !== undefined && now.getTime() < held.expiresAt.getTime() - (ttlMs * 2) / 3) return held;
    const lease = await leases.acquire(name, holder, now, ttlMs);
    // secret-compare: lease fencing tokens the store hands out, never sent by a caller.
    if (lease !== undefined && lease.token !== held?.token) {
      logger.info({ lease: name, token: lease.token }, "lease taken: running the job here");
    }
    this.held = lease;
    return lease;
  }

  /**
   * One step of the job under the lease, taken or renewed first (tests and tools step a job this way);
   * undefined, the step not run, while another instance holds it.
   */
  async once<T>(step: (lease: Lease) => Promise<T>): Promise<T | undefined> {
    const lease = await this.take();
    return lease === undefined ? undefined : step(lease);
  }

  /** Forgets the lease (a write of the job was fenced out: a newer holder exists); the next take asks the store. */
  forget(): void {
    this.held = undefined;
  }

  /** Starts taking part (idempotent while running; after `stop()` has resolved, it starts again). */
  start(): void {
    if (this.running !== undefined) return;
    if (this.stopping.signal.aborted) this.stopping = new AbortController();
    this.running = this.loop(this.stopping.signal);
  }

  /** Stops the job, releases the lease so another instance takes over at once, and resolves when done. */
  async stop(): Promise<void> {
    const running = this.running;
    this.stopping.abort();
    await running;
    if (this.running === running) this.running = undefined;
  }

  /** Takes part until `stopping` aborts: the signal of this start, never a later start's. */
  private async loop(stopping: AbortSignal): Promise<void> {
    const { name, ttlMs, logger, standbyMs = ttlMs / 3 } = this.options;
    while (!stopping.aborted) {
      let lease: Lease | undefined;
      try {
        this.forget();
        lease = await this.take();
      } catch (err) {
        logger.warn({ err, lease: name }, "cannot take the lease: the store is unavailable");
      }
      if (lease === undefined) {
        await sleep(standbyMs, stopping);
        continue;
      }
      await this.hold(lease, stopping);
    }
  }

  /** Runs the job under `lease`, renewing it, until the lease is lost or the runner stops. */
  private async hold(first: Lease, stopping: AbortSignal): Promise<void> {
    const { leases, name, holder, ttlMs, clock, logger, job } = this.options;
    const lost = new AbortController();
    const stop = () => lost.abort();
    stopping.addEventListener("abort", stop, { once: true });
    let lease = first;
    const renew = async () => {
      try {
        const renewed = await leases.acquire(name, holder, clock.now(), ttlMs);
        // secret-compare: lease fencing tokens the store hands out, never sent by a caller.
        if (renewed === undefined || renewed.token !== lease.token) {
          logger.warn({ lease: name, token: lease.token }, "lease lost: stopping the job here");
          this.forget();
          lost.abort();
        } else {
          lease = renewed;
          this.held = renewed;
        }
      } catch (err) {
        // Keep the job while the lease is surely still ours; stop before it could have run out.
        if (clock.now().getTime() >= lease.expiresAt.getTime() - ttlMs / 3) {
          logger.warn({ err, lease: name }, "lease cannot be renewed: stopping the job here");
          this.forget();
          lost.abort();
        }
      }
    };
    const timer = setInterval(() => void renew(), ttlMs / 3);
    try {
      await job(lease, lost.signal);
      // The job gave up on its own (a write fenced out): stand by a while rather than spin.
      if (!lost.signal.aborted) await sleep(this.options.standbyMs ?? ttlMs / 3, stopping);
    } catch (err) {
      logger.error({ err, lease: name }, "background job failed; it starts again");
      await sleep(ttlMs / 3, stopping);
    } finally {
      clearInterval(timer);
      stopping.removeEventListener("abort", stop);
    }
    if (stopping.aborted) {
      this.forget();
      await leases.release(lease).catch(() => undefined);
    }
  }
}

/** Resolves after `ms`, or at once when any of `signals` aborts. */
export function sleep(ms: number, ...signals: AbortSignal[]): Promise<void> {
  if (signals.some((signal) => signal.aborted)) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      for (const signal of signals) signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    for (const signal of signals) signal.addEventListener("abort", done, { once: true });
  });
}
