import type { Clock } from "../../src/clock.js";

/**
 * The real clock, shifted to read five seconds past the start of a minute when it is made. Rate
 * limits count in windows that start on the minute, so a test that counts a few calls against one
 * window has 55 seconds before the window turns; on the system clock it has anywhere from 0 to 60,
 * and a window that turned between two calls once made a CI run count a third call as the first.
 */
export function minuteStartClock(): Clock {
  const offset = 5_000 - (Date.now() % 60_000);
  return { now: () => new Date(Date.now() + offset) };
}
