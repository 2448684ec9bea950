import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { loadConfig } from "../config.js";
import { createLogger } from "../logging.js";
import { createStore } from "../store/index.js";
import { type BinsExtra, httpOperator, type Operator, storeOperator } from "./operator.js";

/**
 * The operator commands of the command line: API keys, BIN prefixes, merchantId
 * assignment, the audit log and escrow counts, against a running server (`--url`, token in
 * `ADMIN_TOKEN`) or against the configured store.
 */

/** A mistake on the command line (exit code 2). */
export class UsageError extends Error {}

/** A configuration that cannot serve the command (exit code 78). */
export class CommandConfigError extends Error {}

export const OPERATOR_HELP = {
  create: `Usage: receipts keys create --role <issuer|merchant> --tenant <id> [options]

Options:
  --role <role>            issuer or merchant (required)
  --tenant <id>            tenant the key belongs to (required)
  --tier <tier>            sandbox, standard (default) or enterprise
  --merchant-ids <a,b>     merchantIds a merchant key may use (default: any)
  --name <label>           free-text label
  --url <url>              a running server's operator API (token in ADMIN_TOKEN); else the store
  --json                   print the created key as JSON (its apiKey field is the key)
The key is printed once, on stdout; only its SHA-256 is stored.`,
  list: `Usage: receipts keys list [--tenant <id>] [--json] [--url <url>]

Lists API keys: id, prefix, environment, tenant, role, tier, merchantIds, created, revoked.`,
  revoke: `Usage: receipts keys revoke <key-id> [--json] [--url <url>]

Revokes the key; calls with it then get 401 unauthorized.`,
  bins: `Usage: receipts bins set <tenant> <bin,bin,...> [options] [--json] [--url <url>]
       receipts bins get <tenant> [--json] [--url <url>]

Sets (replacing the list) or shows the BIN prefixes (6 or 8 digits) an issuer tenant owns. Receipts
that carry a cardBin under one of them go only to that tenant's cardholders, or to its escrow.

Options of set:
  --token-bins <a,b>       replaces the tenant's token BINs too (a wallet token's first digits; "" for none)
  --statements <file>      the tenant's root's bin-claim / bin-release statements, needed once it has a
                           confirmed root: a JSON list of {statement, signature} (base64), as signed
  --releases <file>        releases by other tenants' roots of prefixes this change takes, same form`,
  merchants: `Usage: receipts merchants assign <merchantId> --tenant <id> [--json] [--url <url>]

Gives a merchantId to a merchant tenant; other tenants' use of it is then forbidden.`,
  cards: `Usage: receipts cards transfer <userId> --to <tenant> [--json] [--url <url>]

Moves the card a user holds (both its references) to another issuer tenant: the user keeps its keys
and receipts and no longer holds the card; the card's receipts wait in escrow for <tenant> until it
registers the card. For a card registered by the wrong issuer that no BIN settles.`,
  audit: `Usage: receipts audit [--tenant <id>] [--after <RFC 3339>] [--limit <n>] [--json] [--url <url>]

Reads the audit log in the order it was written, from the first event after --after (default: the
oldest), at most --limit events (default 100).`,
  escrow: `Usage: receipts escrow [--json] [--url <url>]

Counts escrowed receipts by owner tenant and escrow key.`,
} as const;

type Options = NonNullable<Parameters<typeof parseArgs>[0]>["options"];

/** Parses options (and positionals), turning parse errors into usage errors. */
export function parse<T extends Options>(args: string[], options: T) {
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: true });
  } catch (e) {
    throw new UsageError(e instanceof Error ? e.message : String(e));
  }
}

/** `--url` and `--json`, which every operator command takes. */
const URL_OPTION = { url: { type: "string" }, json: { type: "boolean", default: false } } as const;

/** Writes `value` as JSON (`--json`), or else `text`. */
function emit(out: NodeJS.WritableStream, json: boolean | undefined, value: unknown, text: string): void {
  out.write(json === true ? `${JSON.stringify(value, null, 2)}\n` : text);
}

/** Runs `work` with the operator `--url` names, or with the configured store (opened and closed here). */
async function withOperator<T>(url: unknown, work: (operator: Operator) => Promise<T>): Promise<T> {
  if (typeof url === "string" && url !== "") {
    const token = process.env.ADMIN_TOKEN ?? "";
    if (token === "") throw new CommandConfigError("--url needs the server's operator token in ADMIN_TOKEN.");
    return work(httpOperator(url, token));
  }
  const config = loadConfig();
  if (config.store === "memory") {
    throw new CommandConfigError(
      "The embedded in-memory store lives inside the server process: manage a running server with\n" +
        "--url http://localhost:8080 (start it with ADMIN_TOKEN set, and set the same ADMIN_TOKEN here),\n" +
        "or run with STORE=mongodb and MONGODB_URI to work on the store directly.",
    );
  }
  const store = await createStore(config, createLogger("warn"));
  try {
    await store.init();
    return await work(storeOperator(store, config.env));
  } finally {
    await store.close();
  }
}

function list(value: unknown): string[] {
  return String(value ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
}

/** `keys create|list|revoke`. */
export async function keysCommand(
  command: string | undefined,
  args: string[],
  out: NodeJS.WritableStream,
): Promise<void> {
  if (command === "create") {
    const { values } = parse(args, {
      ...URL_OPTION,
      role: { type: "string" },
      tenant: { type: "string" },
      tier: { type: "string", default: "standard" },
      "merchant-ids": { type: "string", default: "" },
      name: { type: "string", default: "" },
    });
    if (values.role !== "issuer" && values.role !== "merchant") {
      throw new UsageError("--role must be issuer or merchant.");
    }
    if (!values.tenant) throw new UsageError("--tenant is required.");
    const merchantIds = list(values["merchant-ids"]);
    if (values.role === "issuer" && merchantIds.length > 0)
      throw new UsageError("--merchant-ids is for merchant keys.");
    const created = await withOperator(values.url, (op) =>
      op.createKey({
        tenant: String(values.tenant),
        role: String(values.role),
        tier: String(values.tier),
        merchantIds,
        name: String(values.name),
      }),
    );
    emit(
      out,
      values.json,
      created,
      `Created ${created.role} key ${created.apiKeyId} for tenant ${created.tenant} (tier ${created.tier}).\n` +
        `API key (shown once, store it now): ${created.apiKey}\n`,
    );
    return;
  }
  if (command === "list") {
    const { values } = parse(args, { ...URL_OPTION, tenant: { type: "string" } });
    const keys = await withOperator(values.url, (op) => op.listKeys(values.tenant));
    if (values.json) {
      out.write(`${JSON.stringify(keys, null, 2)}\n`);
      return;
    }
    out.write("id\tprefix\tenv\ttenant\trole\ttier\tmerchantIds\tcreated\trevoked\n");
    for (const k of keys) {
      const cells = [
        k.apiKeyId,
        k.prefix,
        k.environment,
        k.tenant,
        k.role,
        k.tier,
        k.merchantIds.join(",") || "*",
      ];
      cells.push(k.createdAt, k.revokedAt ?? "-");
      out.write(`${cells.join("\t")}\n`);
    }
    return;
  }
  if (command === "revoke") {
    const { values, positionals } = parse(args, URL_OPTION);
    const [id] = positionals;
    if (id === undefined || positionals.length !== 1) throw new UsageError("Give exactly one key id.");
    await withOperator(values.url, (op) => op.revokeKey(id));
    emit(out, values.json, { apiKeyId: id, revoked: true }, `Revoked ${id}.\n`);
    return;
  }
  throw new UsageError(`Unknown command "keys ${command ?? ""}".`);
}

/** `bins set|get`: the BINs and token BINs of an issuer tenant, with the roots' statements. */
async function binsCommand(args: string[], out: NodeJS.WritableStream): Promise<void> {
  const [command, ...rest] = args;
  const { values, positionals } = parse(rest, {
    ...URL_OPTION,
    "token-bins": { type: "string" },
    statements: { type: "string" },
    releases: { type: "string" },
  });
  const [tenant, bins] = positionals;
  if (command === "set" && tenant !== undefined && bins !== undefined && positionals.length === 2) {
    const extra: BinsExtra = {};
    if (values["token-bins"] !== undefined) extra.tokenBins = list(values["token-bins"]);
    if (values.statements !== undefined)
      extra.statements = await statementsFile("--statements", values.statements);
    if (values.releases !== undefined) extra.releases = await statementsFile("--releases", values.releases);
    const set = await withOperator(values.url, (op) => op.setBins(tenant, list(bins), extra));
    const tokens = set.tokenBins.length === 0 ? "" : ` and token BINs ${set.tokenBins.join(", ")}`;
    emit(
      out,
      values.json,
      set,
      `Tenant ${tenant} owns ${set.bins.join(", ") || "no BIN prefixes"}${tokens}.\n`,
    );
    return;
  }
  if (command === "get" && tenant !== undefined && positionals.length === 1 && !hasSetOptions(values)) {
    const view = await withOperator(values.url, (op) => op.getBins(tenant));
    const lines = [...view.bins, ...view.tokenBins.map((p) => `${p} (token)`)];
    emit(out, values.json, view, lines.map((l) => `${l}\n`).join(""));
    return;
  }
  throw new UsageError(OPERATOR_HELP.bins);
}

function hasSetOptions(values: Record<string, unknown>): boolean {
  return ["token-bins", "statements", "releases"].some((name) => values[name] !== undefined);
}

/**
 * A file of signed statements as `PUT .../bins` takes them: a JSON list of `{statement, signature}`
 * (a single object is taken as a list of one). The service checks each; here only that it is JSON.
 */
async function statementsFile(option: string, path: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (e) {
    throw new UsageError(`${option}: cannot read ${path} (${e instanceof Error ? e.message : String(e)}).`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new UsageError(`${option}: ${path} is not JSON (a list of {statement, signature}).`);
  }
  return Array.isArray(parsed) ? parsed : [parsed];
}

/** `bins set|get`, `merchants assign`, `cards transfer`, `audit`, `escrow`. */
export async function ownershipCommand(
  group: "bins" | "merchants" | "cards" | "audit" | "escrow",
  args: string[],
  out: NodeJS.WritableStream,
): Promise<void> {
  if (group === "bins") {
    await binsCommand(args, out);
    return;
  }
  if (group === "merchants") {
    const [command, ...rest] = args;
    const { values, positionals } = parse(rest, { ...URL_OPTION, tenant: { type: "string" } });
    const [merchantId] = positionals;
    if (command !== "assign" || merchantId === undefined || positionals.length !== 1 || !values.tenant) {
      throw new UsageError(OPERATOR_HELP.merchants);
    }
    const tenant = String(values.tenant);
    await withOperator(values.url, (op) => op.assignMerchant(merchantId, tenant));
    emit(out, values.json, { merchantId, tenant }, `merchantId ${merchantId} belongs to tenant ${tenant}.\n`);
    return;
  }
  if (group === "cards") {
    await cardsCommand(args, out);
    return;
  }
  if (group === "audit") {
    const { values } = parse(args, {
      ...URL_OPTION,
      tenant: { type: "string" },
      after: { type: "string" },
      limit: { type: "string" },
    });
    const events = await withOperator(values.url, (op) =>
      op.readAudit({
        ...(values.tenant === undefined ? {} : { tenant: values.tenant }),
        ...(values.after === undefined ? {} : { after: values.after }),
        ...(values.limit === undefined ? {} : { limit: values.limit }),
      }),
    );
    if (values.json) out.write(`${JSON.stringify(events, null, 2)}\n`);
    else for (const e of events) out.write(`${e.at}\t${e.tenantId}\t${e.action}\t${e.subject ?? ""}\n`);
    return;
  }
  const { values } = parse(args, URL_OPTION);
  const counts = await withOperator(values.url, (op) => op.escrowCounts());
  if (values.json) out.write(`${JSON.stringify(counts, null, 2)}\n`);
  else
    for (const c of counts) out.write(`${c.ownerTenantId ?? "(no owner)"}\t${c.escrowKeyId}\t${c.count}\n`);
}

/** `cards transfer <userId> --to <tenant>`: the operator's card transfer. */
async function cardsCommand(args: string[], out: NodeJS.WritableStream): Promise<void> {
  const [command, ...rest] = args;
  const { values, positionals } = parse(rest, { ...URL_OPTION, to: { type: "string" } });
  const [userId] = positionals;
  if (command !== "transfer" || userId === undefined || positionals.length !== 1 || !values.to) {
    throw new UsageError(OPERATOR_HELP.cards);
  }
  const toTenant = String(values.to);
  const moved = await withOperator(values.url, (op) => op.transferCard(userId, toTenant));
  emit(
    out,
    values.json,
    moved,
    `The card of ${moved.previousUserId} (tenant ${moved.fromTenant}) is now held by ${moved.userId} of tenant ${moved.toTenant}, with no key until ${moved.toTenant} registers it (${moved.transferId}).\n`,
  );
}
