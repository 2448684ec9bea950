import { readFile, rename, writeFile } from "node:fs/promises";
import { fromBase64Strict } from "../kt/bytes.js";
import { type ParsedPolicy, parsePolicy, type TrustPolicy } from "../kt/policy.js";
import type { KtOpenedEntry } from "../kt/wire.js";
import { CommandConfigError, parse, UsageError } from "./admin-commands.js";
import {
  EMPTY_STATE,
  type IssuerRecords,
  type MonitorFileState,
  type MonitorRun,
  type MonitorSource,
  runMonitor,
} from "./kt-monitor.js";

/**
 * `receipts kt monitor`: one run of the issuer's monitor (`kt-monitor.ts`) over HTTP, from cron or a
 * scheduler. Files: the trust policy (`--policy`, the same JSON merchants use), the issuer's own
 * records (`--records`), and the state kept between runs (`--state`, written whole to a new file and
 * renamed over the old one, so a crash never leaves half a state). One line per alert on stdout and
 * exit code 3 when there is any; `--json` prints one document instead.
 */

export const MONITOR_HELP = `Usage: receipts kt monitor --url <url> --policy <file> --records <file> --state <file>
                          [--issuer-key <key>] [--json]

One run of the issuer's key-log monitor (docs/key-transparency.md): reads the log's checkpoint (trusted only
with the log's signature and a fresh witness quorum, by the trust policy), proves it consistent with
the last run's, reads every new leaf (proved to be that tree's), opens the issuer's own leaves through
its feed, and reports: a leaf under your keys your feed does not open or you did not sign, a second
unrevoked binding for a card, a first binding for a card you did not enroll, a directory change you
did not make (your BIN given away, a signing or escrow key listed for you that is not yours), your PAR under another signer, a witness cosigning two roots for one size, and any
checkpoint or history that does not check out. Run it at least as often as you want to hear of a
substitution (every few minutes); the log keeps everything in between.

Options (or environment):
  --url <url>           the service (RECEIPTS_URL)
  --issuer-key <key>    an issuer API key of your tenant (RECEIPTS_ISSUER_KEY): reads leaves and your feed
  --policy <file>       the trust policy JSON (log key, witnesses, quorum, maxCheckpointAgeSeconds)
  --records <file>      your records JSON: {"issuer", "signingKeys": [base64 SPKI], "prefixes": [...],
                        "cards": [{"cardRef", "userId"?, "enrolled"?}], "signed": [hex SHA-256 of each
                        statement you signed], "escrowKeyIds"?, "expectedEntry"?, "erased"?:
                        [{"cardRef", "version": the last statement you signed about it}]}
  --state <file>        the monitor's state between runs (created on the first run)
  --json                print {"treeSize", "leavesRead", "alerts": [{"index"?, "message"}]}
  -h, --help            this help

Exit codes: 0 nothing to report, 3 alerts (one line each on stdout), 1 the run failed (network,
server), 2 usage error, 78 a policy, records or state file that cannot be used.`;

/** The exit code of a run that found something. */
export const EXIT_ALERTS = 3;

/** Runs `receipts kt monitor` with its arguments; returns the exit code (alerts: 3). */
export async function ktMonitorCommand(
  args: string[],
  out: NodeJS.WritableStream,
  env: NodeJS.ProcessEnv,
  fetchFn: typeof fetch = fetch,
  now: () => number = Date.now,
): Promise<number> {
  const { values } = parse(args, {
    url: { type: "string", default: env.RECEIPTS_URL ?? "" },
    "issuer-key": { type: "string", default: env.RECEIPTS_ISSUER_KEY ?? "" },
    policy: { type: "string" },
    records: { type: "string" },
    state: { type: "string" },
    json: { type: "boolean", default: false },
  });
  const url = String(values.url);
  const apiKey = String(values["issuer-key"]);
  if (url === "" || apiKey === "" || !values.policy || !values.records || !values.state) {
    throw new UsageError("kt monitor needs --url, --issuer-key, --policy, --records and --state.");
  }
  const policy = await readJson(values.policy, "policy", (json) => parsePolicy(json as TrustPolicy));
  const records = await readJson(values.records, "records", checkRecords);
  const state = await readState(values.state);
  const run = await runMonitor(
    httpSource(url, apiKey, fetchFn),
    policy as ParsedPolicy,
    records,
    state,
    now(),
  );
  await writeState(values.state, run.state);
  report(run, out, values.json === true);
  return run.alerts.length > 0 ? EXIT_ALERTS : 0;
}

function report(run: MonitorRun, out: NodeJS.WritableStream, json: boolean): void {
  if (json) {
    out.write(
      `${JSON.stringify({ treeSize: run.treeSize, leavesRead: run.leavesRead, alerts: run.alerts })}\n`,
    );
    return;
  }
  for (const alert of run.alerts)
    out.write(`alert: ${alert.index === undefined ? "" : `leaf ${alert.index}: `}${alert.message}\n`);
  if (run.alerts.length === 0)
    out.write(`ok: tree size ${run.treeSize}, ${run.leavesRead} new leaves, nothing to report\n`);
}

async function readJson<T>(path: string, what: string, check: (json: unknown) => T): Promise<T> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (e) {
    throw new CommandConfigError(`cannot read the ${what} file ${path}: ${(e as Error).message}`);
  }
  try {
    return check(JSON.parse(text));
  } catch (e) {
    throw new CommandConfigError(`the ${what} file ${path} cannot be used: ${(e as Error).message}`);
  }
}

function checkRecords(json: unknown): IssuerRecords {
  const r = json as Partial<IssuerRecords>;
  const strings = (v: unknown) => Array.isArray(v) && v.every((x) => typeof x === "string");
  if (typeof r?.issuer !== "string") throw new TypeError("issuer must be the tenant id");
  if (!strings(r.signingKeys) || r.signingKeys?.some((k) => fromBase64Strict(k) === undefined))
    throw new TypeError("signingKeys must be a list of base64 SPKI");
  if (!strings(r.prefixes) || !strings(r.signed))
    throw new TypeError("prefixes and signed must be lists of strings");
  if (!Array.isArray(r.cards) || r.cards.some((c) => typeof c?.cardRef !== "string"))
    throw new TypeError("cards must be a list of {cardRef, userId?, enrolled?}");
  const erasure = (e: { cardRef?: unknown; version?: unknown } | undefined) =>
    typeof e?.cardRef === "string" && Number.isSafeInteger(e.version) && (e.version as number) > 0;
  if (r.erased !== undefined && (!Array.isArray(r.erased) || !r.erased.every(erasure)))
    throw new TypeError("erased must be a list of {cardRef, version}");
  return r as IssuerRecords;
}

async function readState(path: string): Promise<MonitorFileState> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return EMPTY_STATE;
    throw new CommandConfigError(`cannot read the state file ${path}: ${(e as Error).message}`);
  }
  const state = JSON.parse(text) as MonitorFileState;
  if (state?.v !== 1 || typeof state.core?.next !== "number")
    throw new CommandConfigError(
      `the state file ${path} is not a monitor state (never reset silently: move it away to start over)`,
    );
  return state;
}

async function writeState(path: string, state: MonitorFileState): Promise<void> {
  const temporary = `${path}.${process.pid}.tmp`;
  await writeFile(temporary, `${JSON.stringify(state)}\n`, { mode: 0o600, flush: true });
  await rename(temporary, path);
}

/** Leaves read per request. */
const PAGE = 1000;

/**
 * The log over HTTP: `GET /kt/v1/checkpoint` (the note), `GET /kt/v1/proof/consistency`,
 * `GET /kt/v1/entries` (issuer API key) and the issuer's feed `GET /api/v1/kt/entries`.
 */
export function httpSource(baseUrl: string, apiKey: string, fetchFn: typeof fetch = fetch): MonitorSource {
  const get = async (path: string, params: Record<string, string | number> = {}): Promise<Response> => {
    const url = new URL(path, baseUrl.endsWith("/") ? baseUrl : `${baseUrl}/`);
    for (const [name, value] of Object.entries(params)) url.searchParams.set(name, String(value));
    const response = await fetchFn(url, { headers: { "x-api-key": apiKey } });
    if (response.status !== 200) {
      const body = (await response.text()).slice(0, 300);
      throw new Error(`GET ${url.pathname} answered ${response.status}: ${body}`);
    }
    return response;
  };
  const data = async (response: Response) => {
    const body = (await response.json()) as { data?: unknown };
    return (body?.data ?? body) as Record<string, unknown>;
  };
  return {
    checkpoint: async () => (await get("kt/v1/checkpoint")).text(),
    async consistency(from, to) {
      const body = await data(await get("kt/v1/proof/consistency", { from, to }));
      return hashesOf(body.proof ?? body.consistency, "consistency proof");
    },
    async leaves(start, end) {
      const body = await data(await get("kt/v1/entries", { start, end: Math.min(end, start + PAGE) }));
      const entries = body.entries as Array<{ index: number; leaf: string }> | undefined;
      if (!Array.isArray(entries)) throw new Error("GET /kt/v1/entries answered no entries");
      return entries.map((e, i) => {
        const leaf = typeof e?.leaf === "string" ? fromBase64Strict(e.leaf) : undefined;
        if (e?.index !== start + i || leaf === undefined)
          throw new Error(`GET /kt/v1/entries: entry ${start + i} is malformed`);
        return leaf;
      });
    },
    async feed(from) {
      const entries: KtOpenedEntry[] = [];
      let pageToken = "";
      do {
        const after: Record<string, number> = from > 0 ? { after: from - 1 } : {};
        const body = await data(await get("api/v1/kt/entries", { ...after, pageToken }));
        entries.push(...((body.entries as KtOpenedEntry[] | undefined) ?? []));
        const next = typeof body.nextPageToken === "string" ? body.nextPageToken : "";
        if (next !== "" && next === pageToken) throw new Error("the feed answered the same page token twice");
        pageToken = next;
      } while (pageToken !== "");
      return entries;
    },
  };
}

function hashesOf(value: unknown, what: string): Uint8Array[] {
  if (!Array.isArray(value)) throw new Error(`the ${what} is not a list of hashes`);
  return value.map((h) => {
    const bytes = typeof h === "string" ? fromBase64Strict(h, 32) : undefined;
    if (bytes === undefined) throw new Error(`the ${what} holds a malformed hash`);
    return bytes;
  });
}
