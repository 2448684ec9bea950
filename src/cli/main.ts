import { ConfigError } from "../config.js";
import {
  CommandConfigError,
  keysCommand,
  OPERATOR_HELP,
  ownershipCommand,
  parse,
  UsageError,
} from "./admin-commands.js";
import { DemoError, runDemo } from "./demo.js";
import { OPERATOR_API_OFF, OperatorError } from "./operator.js";

/** The command groups that have their own --help. */
const GROUPS = new Set(["keys", "bins", "merchants", "audit", "escrow", "demo"]);

/** Exit codes scripts can rely on. */
export const EXIT = { ok: 0, failure: 1, usage: 2, config: 78 } as const;

const HELP = {
  root: `Usage: receipts <command> [options]

Commands:
  keys create       Create an API key (printed once)
  keys list         List API keys (hashes never shown)
  keys revoke       Revoke an API key by id
  bins set|get      Set or show the BIN prefixes an issuer tenant owns
  merchants assign  Give a merchantId to a merchant tenant
  audit             Read the audit log
  escrow            Count escrowed receipts by owner and key
  demo              Run the five steps plus escrow against a running server, printing each call

Run "receipts <command> --help" for a command's options. Operator commands work on a running server
with --url <url> (its ADMIN_TOKEN in the environment), or else on the store configured by the
environment (STORE, MONGODB_URI, MONGODB_DB, RECEIPTS_ENV), as for the server.`,
  ...OPERATOR_HELP,
  demo: `Usage: receipts demo [--url <url>] [--issuer-key <key>] [--merchant-key <key>]

Runs the five steps of the flow (generate keys, register, create payment, grant, decrypt) and escrow
(encrypt for an unregistered card, register it, list) against a running server over REST, printing
each request and response with private keys, tokens and client secrets masked.

Options (or environment):
  --url <url>              the server (RECEIPTS_URL, default http://localhost:8080)
  --issuer-key <key>       an issuer API key (RECEIPTS_ISSUER_KEY)
  --merchant-key <key>     a merchant API key (RECEIPTS_MERCHANT_KEY)
With the embedded store, use the two keys npm start prints.`,
};

/** Runs the command line with `argv` (without node and script); returns the exit code. */
export async function runCli(
  argv: string[],
  out: NodeJS.WritableStream = process.stdout,
  err: NodeJS.WritableStream = process.stderr,
): Promise<number> {
  const [group, command, ...rest] = argv;
  const wantsHelp = argv.includes("--help") || argv.includes("-h");
  try {
    if (group === undefined || (!GROUPS.has(group) && wantsHelp)) {
      out.write(`${HELP.root}\n`);
      return group === undefined ? EXIT.usage : EXIT.ok;
    }
    if (group === "demo") {
      if (wantsHelp) {
        out.write(`${HELP.demo}\n`);
        return EXIT.ok;
      }
      return await demo(argv.slice(1), out);
    }
    if (group === "keys") {
      if (wantsHelp) {
        const help =
          command === "create" || command === "list" || command === "revoke" ? HELP[command] : HELP.root;
        out.write(`${help}\n`);
        return EXIT.ok;
      }
      await keysCommand(command, rest, out);
      return EXIT.ok;
    }
    if (group === "bins" || group === "merchants" || group === "audit" || group === "escrow") {
      if (wantsHelp) {
        out.write(`${HELP[group]}\n`);
        return EXIT.ok;
      }
      await ownershipCommand(group, argv.slice(1), out);
      return EXIT.ok;
    }
    throw new UsageError(`Unknown command "${group}".`);
  } catch (e) {
    if (e instanceof UsageError) {
      err.write(`${e.message}\nRun "receipts --help" for usage.\n`);
      return EXIT.usage;
    }
    if (e instanceof DemoError) {
      err.write(`Demo failed: ${e.message}\n`);
      return EXIT.failure;
    }
    if (
      e instanceof ConfigError ||
      e instanceof CommandConfigError ||
      (e instanceof OperatorError && e.code === OPERATOR_API_OFF)
    ) {
      err.write(`${e.message}\n`);
      return EXIT.config;
    }
    err.write(`Failed: ${e instanceof Error ? e.message : String(e)}\n`);
    return EXIT.failure;
  }
}

async function demo(args: string[], out: NodeJS.WritableStream): Promise<number> {
  const { values } = parse(args, {
    url: { type: "string", default: process.env.RECEIPTS_URL ?? "http://localhost:8080" },
    "issuer-key": { type: "string", default: process.env.RECEIPTS_ISSUER_KEY ?? "" },
    "merchant-key": { type: "string", default: process.env.RECEIPTS_MERCHANT_KEY ?? "" },
  });
  const issuerKey = String(values["issuer-key"]);
  const merchantKey = String(values["merchant-key"]);
  if (!issuerKey || !merchantKey) {
    throw new UsageError(
      "demo needs --issuer-key and --merchant-key (or RECEIPTS_ISSUER_KEY, RECEIPTS_MERCHANT_KEY).",
    );
  }
  await runDemo({ baseUrl: String(values.url), issuerKey, merchantKey, out });
  return EXIT.ok;
}
