import { parseArgs } from "node:util";
import { ConfigError, loadConfig } from "../config.js";
import { createApiKey } from "../domain/api-keys.js";
import { createLogger } from "../logging.js";
import { createStore } from "../store/index.js";
import type { Role, Store, Tier } from "../store/types.js";
import { DemoError, runDemo } from "./demo.js";

/** Exit codes scripts can rely on. */
export const EXIT = { ok: 0, failure: 1, usage: 2, config: 78 } as const;

const HELP = {
  root: `Usage: receipts <command> [options]

Commands:
  keys create   Create an API key (printed once)
  keys list     List API keys (hashes never shown)
  keys revoke   Revoke an API key by id
  demo          Run the five steps plus escrow against a running server, printing each call

Run "receipts <command> --help" for a command's options. The store is the one configured by the
environment (STORE, MONGODB_URI, MONGODB_DB, RECEIPTS_ENV), as for the server.`,
  create: `Usage: receipts keys create --role <issuer|merchant> --tenant <id> [options]

Options:
  --role <role>            issuer or merchant (required)
  --tenant <id>            tenant the key belongs to (required)
  --tier <tier>            sandbox, standard (default) or enterprise
  --merchant-ids <a,b>     merchantIds a merchant key may use (default: any)
  --name <label>           free-text label
The key is printed once, on stdout; only its SHA-256 is stored.`,
  list: `Usage: receipts keys list [--json]

Lists every API key: id, prefix, environment, tenant, role, tier, merchantIds, created, revoked.`,
  demo: `Usage: receipts demo [--url <url>] [--issuer-key <key>] [--merchant-key <key>]

Runs the five steps of the flow (generate keys, register, create payment, grant, decrypt) and escrow
(encrypt for an unregistered card, register it, list) against a running server over REST, printing
each request and response with private keys, tokens and client secrets masked. Every run uses fresh
test card numbers and ids, so it can be repeated against the same server.

Options (or environment):
  --url <url>              the server (RECEIPTS_URL; default http://localhost:$PORT, PORT from the
                           environment as for the server, else 8080)
  --issuer-key <key>       an issuer API key (RECEIPTS_ISSUER_KEY)
  --merchant-key <key>     a merchant API key (RECEIPTS_MERCHANT_KEY)
  -h, --help               this help
With the embedded store, use the two keys npm start prints.`,
  revoke: `Usage: receipts keys revoke <key-id>

Revokes the key; calls with it then get 401 unauthorized.`,
};

class UsageError extends Error {}

/** Runs the command line with `argv` (without node and script); returns the exit code. */
export async function runCli(
  argv: string[],
  out: NodeJS.WritableStream = process.stdout,
  err: NodeJS.WritableStream = process.stderr,
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  const [group, command, ...rest] = argv;
  const wantsHelp = argv.includes("--help") || argv.includes("-h");
  try {
    if (group === "demo") {
      if (wantsHelp) {
        out.write(`${HELP.demo}\n`);
        return EXIT.ok;
      }
      return await demo(argv.slice(1), out, env);
    }
    if (group === undefined || (group !== "keys" && wantsHelp)) {
      out.write(`${HELP.root}\n`);
      return group === undefined ? EXIT.usage : EXIT.ok;
    }
    if (group !== "keys") throw new UsageError(`Unknown command "${group}".`);
    if (command !== "create" && command !== "list" && command !== "revoke") {
      if (wantsHelp) {
        out.write(`${HELP.root}\n`);
        return EXIT.ok;
      }
      throw new UsageError(`Unknown command "keys ${command ?? ""}".`);
    }
    if (wantsHelp) {
      out.write(`${HELP[command]}\n`);
      return EXIT.ok;
    }
    const config = loadConfig();
    if (config.store === "memory") {
      err.write(
        "The embedded in-memory store lives inside the server process, so keys cannot be managed from here.\n" +
          "In development the server prints an issuer and a merchant key at start-up; for managed keys run with\n" +
          "STORE=mongodb and MONGODB_URI.\n",
      );
      return EXIT.config;
    }
    const store = await createStore(config, createLogger("warn"));
    try {
      await store.init();
      if (command === "create") return await create(store, config.env, rest, out);
      if (command === "list") return await list(store, rest, out);
      return await revoke(store, rest, out);
    } finally {
      await store.close();
    }
  } catch (e) {
    if (e instanceof UsageError) {
      err.write(`${e.message}\nRun "receipts --help" for usage.\n`);
      return EXIT.usage;
    }
    if (e instanceof DemoError) {
      err.write(`Demo failed: ${e.message}\n`);
      return EXIT.failure;
    }
    if (e instanceof ConfigError) {
      err.write(`${e.message}\n`);
      return EXIT.config;
    }
    err.write(`Failed: ${e instanceof Error ? e.message : String(e)}\n`);
    return EXIT.failure;
  }
}

async function create(
  store: Store,
  env: Parameters<typeof createApiKey>[1],
  args: string[],
  out: NodeJS.WritableStream,
): Promise<number> {
  const { values } = parse(args, {
    role: { type: "string" },
    tenant: { type: "string" },
    tier: { type: "string", default: "standard" },
    "merchant-ids": { type: "string", default: "" },
    name: { type: "string", default: "" },
  });
  const role = values.role;
  if (role !== "issuer" && role !== "merchant") throw new UsageError("--role must be issuer or merchant.");
  if (!values.tenant) throw new UsageError("--tenant is required.");
  const tier = values.tier;
  if (tier !== "sandbox" && tier !== "standard" && tier !== "enterprise") {
    throw new UsageError("--tier must be sandbox, standard or enterprise.");
  }
  const merchantIds = String(values["merchant-ids"])
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  if (role === "issuer" && merchantIds.length > 0)
    throw new UsageError("--merchant-ids is for merchant keys.");
  const { key, record } = await createApiKey(
    store,
    env,
    {
      role: role as Role,
      tier: tier as Tier,
      tenantId: String(values.tenant),
      merchantIds,
      name: String(values.name),
    },
    new Date(),
  );
  out.write(`Created ${record.role} key ${record.id} for tenant ${record.tenantId} (tier ${record.tier}).\n`);
  out.write(`API key (shown once, store it now): ${key}\n`);
  return EXIT.ok;
}

/**
 * The server the demo calls when neither `--url` nor `RECEIPTS_URL` says: `http://localhost:$PORT`, the
 * port the server itself would take from the same environment (8080 unless `PORT` is set).
 */
export function defaultDemoUrl(env: NodeJS.ProcessEnv): string {
  const port = env.PORT?.trim() || "8080";
  return `http://localhost:${port}`;
}

async function demo(args: string[], out: NodeJS.WritableStream, env: NodeJS.ProcessEnv): Promise<number> {
  const fallback = defaultDemoUrl(env);
  const { values } = parse(args, {
    url: { type: "string", default: env.RECEIPTS_URL || fallback },
    "issuer-key": { type: "string", default: env.RECEIPTS_ISSUER_KEY ?? "" },
    "merchant-key": { type: "string", default: env.RECEIPTS_MERCHANT_KEY ?? "" },
  });
  const urlSource = args.some((arg) => arg === "--url" || arg.startsWith("--url="))
    ? "--url"
    : env.RECEIPTS_URL
      ? "RECEIPTS_URL"
      : `the default, from ${env.PORT?.trim() ? "PORT" : "no PORT set"}`;
  const issuerKey = String(values["issuer-key"]);
  const merchantKey = String(values["merchant-key"]);
  if (!issuerKey || !merchantKey) {
    throw new UsageError(
      "demo needs --issuer-key and --merchant-key (or RECEIPTS_ISSUER_KEY, RECEIPTS_MERCHANT_KEY).",
    );
  }
  await runDemo({ baseUrl: String(values.url), urlSource, issuerKey, merchantKey, out });
  return EXIT.ok;
}

async function list(store: Store, args: string[], out: NodeJS.WritableStream): Promise<number> {
  const { values } = parse(args, { json: { type: "boolean", default: false } });
  const keys = (await store.apiKeys.list()).map(({ keyHash: _hash, ...shown }) => shown);
  if (values.json) {
    out.write(`${JSON.stringify(keys, null, 2)}\n`);
    return EXIT.ok;
  }
  out.write("id\tprefix\tenv\ttenant\trole\ttier\tmerchantIds\tcreated\trevoked\n");
  for (const k of keys) {
    const cells = [k.id, k.prefix, k.env, k.tenantId, k.role, k.tier, k.merchantIds.join(",") || "*"];
    cells.push(k.createdAt.toISOString(), k.revokedAt?.toISOString() ?? "-");
    out.write(`${cells.join("\t")}\n`);
  }
  return EXIT.ok;
}

async function revoke(store: Store, args: string[], out: NodeJS.WritableStream): Promise<number> {
  const { positionals } = parseArgs({ args, allowPositionals: true, strict: true, options: {} });
  const [id] = positionals;
  if (id === undefined || positionals.length !== 1) throw new UsageError("Give exactly one key id.");
  if (!(await store.apiKeys.revoke(id, new Date()))) {
    out.write(`No API key with id ${id}.\n`);
    return EXIT.failure;
  }
  out.write(`Revoked ${id}.\n`);
  return EXIT.ok;
}

type Options = NonNullable<Parameters<typeof parseArgs>[0]>["options"];

function parse<T extends Options>(args: string[], options: T) {
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: false });
  } catch (e) {
    throw new UsageError(e instanceof Error ? e.message : String(e));
  }
}
