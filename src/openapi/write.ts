import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { formatJson } from "./format.js";
import { serviceOpenApi } from "./openapi.js";

/**
 * The checked-in copy of the OpenAPI document, `openapi/openapi.json`, for readers and tools that want
 * a file. The server serves `serviceOpenApi()` itself; `test/openapi/checked-in.test.ts` fails
 * when the file and the protos disagree.
 *
 *   node dist/src/openapi/write.js [file]          writes the file
 *   node dist/src/openapi/write.js --check [file]  exits 1 when the file is stale
 *
 * or, without a build, `UPDATE_OPENAPI=1 npx vitest run test/openapi`.
 */

/** Where the checked-in document lives, relative to the repository root. */
export const OPENAPI_FILE = "openapi/openapi.json";

/** The exact text of the checked-in file: {@link serviceOpenApi} formatted as the linter wants it. */
export function openApiText(): string {
  return formatJson(serviceOpenApi());
}

/** Writes {@link openApiText} to `file` (default {@link OPENAPI_FILE} under the working directory). */
export async function writeOpenApi(file = OPENAPI_FILE): Promise<void> {
  await mkdir(dirname(resolve(file)), { recursive: true });
  await writeFile(file, openApiText());
}

/** Whether `file` holds exactly {@link openApiText}; false when it is missing. */
export async function isOpenApiFresh(file = OPENAPI_FILE): Promise<boolean> {
  const current = await readFile(file, "utf8").catch(() => undefined);
  return current === openApiText();
}

async function main(args: string[]): Promise<number> {
  const check = args.includes("--check");
  const file = args.find((a) => a !== "--check") ?? OPENAPI_FILE;
  if (check) {
    if (await isOpenApiFresh(file)) return 0;
    process.stderr.write(`${file} is stale; run node dist/src/openapi/write.js\n`);
    return 1;
  }
  await writeOpenApi(file);
  process.stdout.write(`wrote ${file}\n`);
  return 0;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
