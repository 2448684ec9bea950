import type { Logger } from "pino";

/**
 * Work a call starts and does not wait for: the escrow release of a registration beyond its first
 * page. A task's failure is logged, never thrown (nothing is lost: what it did not release stays
 * escrowed, and the card's next registration releases it). `idle` lets shutdown wait for what runs.
 */
export class BackgroundTasks {
  private readonly running = new Set<Promise<void>>();

  constructor(private readonly logger: Logger) {}

  /** Starts `task` now; `name` says what it was in the log line of its failure. */
  run(name: string, task: () => Promise<unknown>): void {
    const done: Promise<void> = task().then(
      () => undefined,
      (err: unknown) => this.logger.warn({ err, task: name }, "background task failed"),
    );
    this.running.add(done);
    void done.finally(() => this.running.delete(done));
  }

  /** How many tasks are running. */
  get size(): number {
    return this.running.size;
  }

  /** Resolves once every task started so far, and every task they started, has settled. */
  async idle(): Promise<void> {
    while (this.running.size > 0) await Promise.all([...this.running]);
  }
}
