import { AppError } from "../../src/errors.js";
import type { HttpBinding } from "../../src/http/bindings.js";

/** The binding of the method named `name` among `bindings`; throws when there is none. */
export function bindingNamed(bindings: HttpBinding[], name: string): HttpBinding {
  const found = bindings.find((b) => b.method.name === name);
  if (found === undefined) throw new Error(`no binding ${name}`);
  return found;
}

/** What `read` gives: its message, or the code, message and field violations of the `AppError` it throws. */
export function outcome(read: () => unknown): unknown {
  try {
    return { message: read() };
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    return { code: err.code, message: err.message, violations: err.violations };
  }
}
