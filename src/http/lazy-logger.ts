import type { FastifyBaseLogger } from "fastify";
import type { Bindings, LevelWithSilentOrString, Logger } from "pino";

/**
 * A child of `parent` with `bindings` that is created on first use. Fastify makes a child logger per
 * request (`request.log`), and a pino child of a redacting logger costs a few microseconds and some
 * garbage even when the request logs nothing, which is nearly always: calls at a disabled level are
 * dropped here without making the child.
 */
export function lazyChildLogger(parent: Logger, bindings: Bindings): FastifyBaseLogger {
  return new LazyChildLogger(parent, bindings) as unknown as FastifyBaseLogger;
}

/**
 * The logger behind {@link lazyChildLogger}: a class, so that the per-request object is three fields
 * and its methods live on the prototype (an object literal with a closure per method was about 1 KB
 * of garbage per request).
 */
class LazyChildLogger {
  private made: Logger | undefined;

  constructor(
    private readonly parent: Logger,
    private readonly bindings: Bindings,
  ) {}

  private real(): Logger {
    this.made ??= this.parent.child(this.bindings);
    return this.made;
  }

  /** Logs at `level` through the child, unless the level is off and no child exists yet. */
  private write(level: "fatal" | "error" | "warn" | "info" | "debug" | "trace", args: unknown[]): void {
    if (this.made === undefined && !this.parent.isLevelEnabled(level)) return;
    (this.real()[level] as (...a: unknown[]) => void)(...args);
  }

  get level(): LevelWithSilentOrString {
    return this.made?.level ?? this.parent.level;
  }

  set level(level: LevelWithSilentOrString) {
    this.real().level = level;
  }

  isLevelEnabled(level: string): boolean {
    return (this.made ?? this.parent).isLevelEnabled(level);
  }

  child(more: Bindings, options?: object): Logger {
    return this.real().child(more, options);
  }

  silent(): void {}

  fatal(...args: unknown[]): void {
    this.write("fatal", args);
  }

  error(...args: unknown[]): void {
    this.write("error", args);
  }

  warn(...args: unknown[]): void {
    this.write("warn", args);
  }

  info(...args: unknown[]): void {
    this.write("info", args);
  }

  debug(...args: unknown[]): void {
    this.write("debug", args);
  }

  trace(...args: unknown[]): void {
    this.write("trace", args);
  }
}
