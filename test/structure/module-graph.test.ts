import { join, relative } from "node:path";
import { build } from "esbuild";
import { describe, expect, it } from "vitest";

/**
 * A crypto worker and the command line load no transport code: the fast-path switch they read
 * (src/fast-paths.ts) imports nothing, and each fast path lives beside its owner, so learning a flag
 * never pulls the gRPC server, Fastify or Connect's server adapters into a worker thread or the CLI.
 * The graph is the one esbuild resolves from each entry, every static and dynamic import followed.
 */

const ROOT = join(import.meta.dirname, "../..");

/** Packages and built-ins that are transport: servers, protocol adapters, HTTP/2. */
const TRANSPORT_PACKAGES = [
  "fastify",
  "@connectrpc/connect-fastify",
  "@connectrpc/connect-node",
  "@connectrpc/connect/protocol-grpc",
  "@connectrpc/connect/protocol-connect",
  "@grpc/grpc-js",
  "node:http2",
];

/** The project files and the packages the module graph of `entry` loads. */
async function graphOf(entry: string): Promise<{ files: string[]; packages: string[] }> {
  const result = await build({
    entryPoints: [join(ROOT, entry)],
    absWorkingDir: ROOT,
    bundle: true,
    write: false,
    platform: "node",
    format: "esm",
    packages: "external",
    metafile: true,
    logLevel: "silent",
  });
  const inputs = Object.entries(result.metafile.inputs);
  const packages = new Set(
    inputs.flatMap(([, input]) => input.imports.filter((i) => i.external).map((i) => i.path)),
  );
  return { files: inputs.map(([file]) => relative(ROOT, join(ROOT, file))), packages: [...packages] };
}

/** What of the graph is transport: forbidden packages and src/http, src/app, src/rpc/services modules. */
function transportIn(graph: { files: string[]; packages: string[] }): string[] {
  const files = graph.files.filter(
    (file) => file.startsWith("src/http/") || file.startsWith("src/rpc/services/") || file === "src/app.ts",
  );
  const packages = graph.packages.filter((name) => TRANSPORT_PACKAGES.includes(name));
  return [...files, ...packages].sort();
}

describe("module graph", () => {
  it("of a crypto worker holds no transport module", async () => {
    const graph = await graphOf("src/crypto/crypto-worker.ts");
    expect(graph.files).toContain("src/fast-paths.ts");
    expect(transportIn(graph)).toEqual([]);
  });

  it("of the command line holds no transport module", async () => {
    const graph = await graphOf("src/cli/bin.ts");
    expect(graph.files).toContain("src/cli/main.ts");
    expect(transportIn(graph)).toEqual([]);
  });

  it("of the server holds the transport, so the check above can see it", async () => {
    const found = transportIn(await graphOf("src/main.ts"));
    expect(found).toEqual(
      expect.arrayContaining(["fastify", "node:http2", "src/http/grpc-unary.ts", "src/app.ts"]),
    );
  });
});
