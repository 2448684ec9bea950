/** Every change from `before` to `after` that breaks a client of `before`, one sentence each. */
export function breakingChanges(before: object, after: object): string[];
