import type { FastifyBaseLogger } from "fastify";
import type { Bindings, LevelWithSilentOrString, Logger } from "pino";

/**
 * A child of `parent` with `bindings` that is created on first use. Fastify makes a child logger per
 * request (`request.log`), and a pino child of a redacting logger costs a few microseconds and some
 * garbage even when the request logs nothing, which is nearly always: calls at a disabled level are
 * dropped here without making the child.
 */
export function lazyChildLogger(parent: Logger, bindings: Bindings): FastifyBaseLogger {
  return new LazyChildLogger(parent, bindings, CHILD) as unknown as FastifyBaseLogger;
}

/** How a lazy child makes its real one from its parent: the parent's own `child`. */
type MakeChild = (this: Logger, bindings: Bindings) => Logger;

const CHILD: MakeChild = function (this: Logger, bindings: Bindings) {
  return this.child(bindings);
};

/**
 * The logger to give Fastify as `loggerInstance` so that each request's logger is a
 * {@link lazyChildLogger} while Fastify keeps its default child logger factory. Fastify makes its
 * app logger once, as `instance.child({}, options)`, and each request's as `app.child(bindings,
 * options)`; with a custom `childLoggerFactory` instead, it checked every request's logger for seven
 * methods (`validateLogger`), which the default factory skips. The app logger made here is pino's,
 * with `child` changed: without options (a route's own level or serializers) it returns a lazy
 * child, whose real child is pino's; with options, pino's child at once. Children of the app logger
 * inherit that `child`, so theirs are lazy too; `root` itself is not changed.
 */
export function withLazyRequestLoggers(root: Logger): Logger {
  const instance = Object.create(root) as Logger;
  instance.child = (bindings, options) => {
    const app = root.child(bindings, options);
    const pinoChild = app.child as MakeChild & Logger["child"];
    app.child = function (this: Logger, more: Bindings, childOptions?: object) {
      if (childOptions !== undefined && hasAny(childOptions)) return pinoChild.call(this, more, childOptions);
      return new LazyChildLogger(this, more, pinoChild) as unknown as Logger;
    } as Logger["child"];
    return app;
  };
  return instance;
}

/** Whether `options` has an own enumerable member (Fastify passes `{}` for a route without options). */
function hasAny(options: object): boolean {
  for (const _ in options) return true;
  return false;
}

/**
 * The logger behind {@link lazyChildLogger}: a class, so that the per-request object is four fields
 * and its methods live on the prototype (an object literal with a closure per method was about 1 KB
 * of garbage per request).
 */
class LazyChildLogger {
  private made: Logger | undefined;

  constructor(
    private readonly parent: Logger,
    private readonly bindings: Bindings,
    private readonly make: MakeChild,
  ) {}

  private real(): Logger {
    this.made ??= this.make.call(this.parent, this.bindings);
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
