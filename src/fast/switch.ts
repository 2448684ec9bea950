/**
 * Which fast paths are on (see index.ts, which names and explains each). Process-wide, set once
 * before serving: by `buildApp` from `FAST_PATHS` (src/config.ts) and by each crypto worker.
 */
export const FAST_PATHS = ["grpc-server", "json-reader", "json-writer", "one-pass", "der"] as const;

/** One of the fast paths. */
export type FastPath = (typeof FAST_PATHS)[number];

/** Fast paths that only serve another, and the one each serves: the one-pass read is the compiled JSON reader's. */
export const FAST_PATH_NEEDS: readonly (readonly [FastPath, FastPath])[] = [["one-pass", "json-reader"]];

let enabled: ReadonlySet<FastPath> = new Set(FAST_PATHS);

/** Switches the fast paths: those in `paths` on, every other off. Default: all on. */
export function useFastPaths(paths: Iterable<FastPath>): void {
  enabled = new Set(paths);
}

/** The fast paths now on, in the order of {@link FAST_PATHS}. */
export function fastPathsOn(): FastPath[] {
  return FAST_PATHS.filter((path) => enabled.has(path));
}

/** Whether `path` is on. */
export function isOn(path: FastPath): boolean {
  return enabled.has(path);
}
