import type { FastifyBaseLogger } from "fastify";
import type { Bindings, LevelWithSilentOrString, Logger } from "pino";

type LogMethod = "fatal" | "error" | "warn" | "info" | "debug" | "trace";
const METHODS: readonly LogMethod[] = ["fatal", "error", "warn", "info", "debug", "trace"];

/**
 * A child of `parent` with `bindings` that is created on first use. Fastify makes a child logger per
 * request (`request.log`), and a pino child of a redacting logger costs a few microseconds and some
 * garbage even when the request logs nothing, which is nearly always: calls at a disabled level are
 * dropped here without making the child.
 */
export function lazyChildLogger(parent: Logger, bindings: Bindings): FastifyBaseLogger {
  let child: Logger | undefined;
  const real = () => {
    child ??= parent.child(bindings);
    return child;
  };
  const logger = {
    get level(): LevelWithSilentOrString {
      return child?.level ?? parent.level;
    },
    set level(level: LevelWithSilentOrString) {
      real().level = level;
    },
    silent: () => undefined,
    child: (more: Bindings, options?: object) => real().child(more, options),
    isLevelEnabled: (level: string) => (child ?? parent).isLevelEnabled(level),
  } as unknown as FastifyBaseLogger & Record<LogMethod, (...args: unknown[]) => void>;
  for (const method of METHODS) {
    logger[method] = (...args: unknown[]) => {
      if (child === undefined && !parent.isLevelEnabled(method)) return;
      (real()[method] as (...a: unknown[]) => void)(...args);
    };
  }
  return logger;
}
