import { readFileSync } from "node:fs";

/**
 * A summary of a V8 CPU profile (`node --cpu-prof`): the functions with the most self time, and self
 * time grouped by where the code lives (our `dist/src` folders, each npm package, Node internals).
 */

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Where a script lives: `ours:src/http`, `fastify`, `@bufbuild/protobuf`, `node:internal`, ... */
function owner(url: string, functionName: string): string {
  if (url === "") return functionName || "(native)";
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg?.[1] !== undefined) return pkg[1];
  if (url.startsWith("node:")) return `node:${url.slice(5).split("/")[0]}`;
  const ours = /\/dist\/((?:src|gen|bench)\/[^/]+)/.exec(url);
  return ours?.[1] !== undefined ? `ours:${ours[1].replace(/\.js$/, "")}` : url;
}

function shortUrl(url: string): string {
  return url.replace(/^.*node_modules\//, "").replace(/^file:\/\/.*\/dist\//, "dist/");
}

/** The `top` functions by self time and the self time by owner, as text lines with percentages. */
export function summariseProfile(file: string, top = 30): string {
  const profile = JSON.parse(readFileSync(file, "utf8")) as Profile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfTime = new Map<string, number>();
  const ownerTime = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const node = byId.get(id);
    const dt = profile.timeDeltas[i] ?? 0;
    if (node === undefined) return;
    const { functionName, url, lineNumber } = node.callFrame;
    const key = `${functionName || "(anonymous)"} ${shortUrl(url)}${url ? `:${lineNumber + 1}` : ""}`;
    selfTime.set(key, (selfTime.get(key) ?? 0) + dt);
    const where = owner(url, functionName);
    ownerTime.set(where, (ownerTime.get(where) ?? 0) + dt);
    total += dt;
  });
  const lines = (map: Map<string, number>, n: number) =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([key, t]) => `${((t / total) * 100).toFixed(1).padStart(5)}%  ${key}`);
  return [
    "self time by function:",
    ...lines(selfTime, top),
    "self time by owner:",
    ...lines(ownerTime, 20),
  ].join("\n");
}
