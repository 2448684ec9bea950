import { type Logger, pino } from "pino";

/**
 * Names of the members that hold a secret (issue 38): their values are replaced by
 * `[redacted]` in every log line, at any depth and inside arrays, whatever the case of the name or
 * its `-` / `_` spelling (`privateKey`, `private_key`, `X-Api-Key`). Named here even for features
 * that have not landed yet, so they are covered the day they do: PARs, webhook secrets, the key
 * directory's statements and openings.
 */
export const REDACTED_NAMES = [
  // Private keys, key material and the service's own secrets.
  "privateKey",
  "privateKeys",
  "escrowPrivateKey",
  "escrowPrivateKeys",
  "aesKey",
  "rawKey",
  "hashedPanPepper",
  "pepper",
  // Tokens, credentials and API keys.
  "token",
  "tokenId",
  "accessTokenId",
  "adminToken",
  "authorization",
  "cookie",
  "clientSecret",
  "secret",
  "webhookSecret",
  "signingSecret",
  "password",
  "passphrase",
  "apiKey",
  "x-api-key",
  "x-receipt-signature",
  // Card data: hashed PANs, PARs, payment nonces.
  "pan",
  "hashedPan",
  "hashedPans",
  "recipientHashedPan",
  "par",
  "pars",
  "recipientPar",
  "paymentAccountReference",
  // The keyed card reference the stores key a card by: not reversible, but one card's mark everywhere.
  "panHash",
  "cardNonce",
  // Receipt contents.
  "receipt",
  "plaintext",
  // Key-directory statements and their openings.
  "statement",
  "statements",
  "opening",
  "openings",
];

/** What a redacted value is replaced with. */
export const CENSOR = "[redacted]";

/** Objects nested deeper than this are replaced by {@link TOO_DEEP} rather than walked. */
const MAX_DEPTH = 32;
const TOO_DEEP = "[redacted: nested too deep]";
const CIRCULAR = "[Circular]";

/** A member name as compared: lower case, without `-` and `_`. */
function normalized(name: string): string {
  return name.toLowerCase().replace(/[-_]/g, "");
}

const SECRET_NAMES: ReadonlySet<string> = new Set(REDACTED_NAMES.map(normalized));

/** Whether a member of this name holds a secret. */
export function isSecretName(name: string): boolean {
  return SECRET_NAMES.has(normalized(name));
}

/**
 * `value` with every member named in {@link REDACTED_NAMES} replaced by {@link CENSOR}, at any depth
 * and inside arrays; the same object when it holds none (nothing is copied then). Walks plain objects,
 * arrays and errors (their own enumerable members, as pino writes them); other class instances are
 * written by pino as they are and are not walked (a Fastify request or a socket would be a graph of
 * thousands of objects, and reading their getters has effects). Cycles are left to pino.
 */
export function redactSecrets<T>(value: T): T {
  return redact(value, 0, new Set()) as T;
}

function redact(value: unknown, depth: number, path: Set<object>): unknown {
  if (value === null || typeof value !== "object") return value;
  // A member that refers back to an object it is inside: what pino would write, and never the
  // original, which may hold the secrets its copy had redacted.
  if (path.has(value)) return CIRCULAR;
  const isArray = Array.isArray(value);
  const isError = value instanceof Error;
  if (!isArray && !isError) {
    const proto = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) return value;
  }
  if (depth >= MAX_DEPTH) return TOO_DEEP;
  path.add(value);
  let copy: Record<string, unknown> | undefined;
  if (isArray) {
    let items: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const item = value[i];
      const redacted = redact(item, depth + 1, path);
      if (redacted !== item) {
        items ??= value.slice();
        items[i] = redacted;
      }
    }
    path.delete(value);
    return items ?? value;
  } else {
    const record = value as Record<string, unknown>;
    for (const name of Object.keys(record)) {
      const member = record[name];
      const redacted = member !== undefined && isSecretName(name) ? CENSOR : redact(member, depth + 1, path);
      if (redacted !== member) {
        copy ??= isError ? copyOfError(value as Error) : { ...record };
        copy[name] = redacted;
      }
    }
  }
  path.delete(value);
  return copy ?? value;
}

/**
 * A copy of an error that keeps its prototype, message and stack (which are not enumerable). On Node
 * 24 `stack` is an own accessor that reads the original error's internal slot and gives `undefined`
 * on a copy, so the copy gets the text itself (without it a redacted error lost its stack trace).
 */
function copyOfError(error: Error): Record<string, unknown> {
  const copy = Object.create(Object.getPrototypeOf(error), Object.getOwnPropertyDescriptors(error));
  Object.defineProperty(copy, "stack", { value: error.stack });
  return copy;
}

/**
 * Creates the root logger: pino JSON lines to stdout (or `destination`) with every secret redacted
 * by name at any depth ({@link redactSecrets}, in pino's `formatters`, so every child inherits it).
 * Not pino's `redact` paths: they reach only the depths they spell out, and measured slower (a flat
 * 5-member line: 55 us with the 25 one-level paths this replaced, 505 us with 104 paths to depth 4,
 * 1.3 us walked; a nested line with secrets: 44, 289 and 8 us; paths to depth 4 still leaked a
 * secret five levels down).
 */
export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  const options: pino.LoggerOptions = {
    level,
    formatters: { log: redactSecrets, bindings: redactSecrets },
    base: { service: "receipts" },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  const logger = destination ? pino(options, destination) : pino(options);
  // pino runs `formatters.bindings` for the root's own bindings only, never a child's: every child,
  // grandchildren included (they inherit this property), gets its bindings redacted here instead.
  type ChildOf = (this: unknown, bindings: pino.Bindings, options?: object) => unknown;
  const pinoChild = logger.child as unknown as ChildOf;
  const child: ChildOf = function (this: unknown, bindings, childOptions) {
    return pinoChild.call(this, redactSecrets(bindings), childOptions);
  };
  logger.child = child as unknown as Logger["child"];
  return logger;
}
