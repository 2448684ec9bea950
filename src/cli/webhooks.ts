import { parse, UsageError } from "./admin-commands.js";
import { OperatorError } from "./operator.js";

/**
 * `receipts webhooks ...`: a tenant's webhook endpoints (docs/events.md) against a running server, with
 * the tenant's own API key, over the same REST API any client uses: create (the secret printed once),
 * list, delete, rotate the secret, the delivery log, replay of one event, and the event feed.
 */

export const WEBHOOKS_HELP = `Usage: receipts webhooks <command> [options]

Commands:
  create <endpoint-url> [--events a,b] [--description d]
                           Create an endpoint; its secret (whsec_...) is printed once
  list                     The tenant's endpoints (secrets never shown)
  delete <endpointId>      Delete an endpoint
  rotate <endpointId> [--signing-key]
                           A new secret (printed once); the old one signs beside it for 24 hours.
                           --signing-key also replaces the Ed25519 key
  deliveries <endpointId> [--page-token t]
                           An endpoint's delivery log, newest first
  replay <endpointId> <eventId>
                           Send one event to the endpoint again
  events [--after <eventId>] [--page-size n]
                           The tenant's events after an event id (the pull feed)

Options (or environment):
  --url <url>              the server (RECEIPTS_URL; default http://localhost:$PORT, else 8080)
  --api-key <key>          the tenant's API key, issuer or merchant (RECEIPTS_API_KEY)
  --json                   print the answer as JSON
  -h, --help               this help
--events takes event types separated by commas, or * (the default) for every type of the key's role.`;

/** The REST API with a tenant's key: the answer's `data`, or an {@link OperatorError} with its code. */
function restCaller(baseUrl: string, apiKey: string) {
  return async <T>(method: string, path: string, body?: unknown): Promise<T> => {
    const url = new URL(`/api/v1${path}`, baseUrl);
    let response: Response;
    try {
      response = await fetch(url, {
        method,
        headers: {
          "x-api-key": apiKey,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    } catch (e) {
      const cause = e instanceof Error && e.cause instanceof Error ? e.cause.message : String(e);
      throw new OperatorError("unreachable", `Cannot reach the server at ${url.origin} (${cause}).`);
    }
    let parsed: { success?: boolean; data?: T; error?: { code: string; message: string; details?: string } };
    try {
      parsed = JSON.parse(await response.text());
    } catch {
      throw new OperatorError(
        "bad_response",
        `The server answered HTTP ${response.status} without the JSON envelope.`,
      );
    }
    if (parsed.success === true) return parsed.data as T;
    const error = parsed.error ?? { code: `http_${response.status}`, message: "Request failed." };
    throw new OperatorError(error.code, error.details ? `${error.message} ${error.details}` : error.message);
  };
}

interface EndpointView {
  endpointId: string;
  url: string;
  events: string[];
  status: string;
  publicKeys?: string[];
  secret?: string;
  previousSecretExpiresAt?: string;
  disabledReason?: string;
}

/** One line per endpoint, with its public keys (they are public) and never a secret. */
function endpointLine(e: EndpointView): string {
  const disabled = e.status === "disabled" ? ` (${e.disabledReason ?? "disabled"})` : "";
  return `${e.endpointId}  ${e.status}${disabled}  ${e.url}  events=${e.events.join(",")}  keys=${(e.publicKeys ?? []).join(",")}\n`;
}

/** What each subcommand gets: the parsed options, its positionals, a caller and a printer. */
interface Run {
  values: Record<string, string | boolean | undefined>;
  first: string | undefined;
  second: string | undefined;
  call: ReturnType<typeof restCaller>;
  emit: (value: unknown, text: string) => void;
  need: (value: string | undefined, what: string) => string;
}

/** Runs `receipts webhooks <command> ...`. */
export async function webhooksCommand(
  args: string[],
  out: NodeJS.WritableStream,
  env: NodeJS.ProcessEnv,
  defaultUrl: string,
): Promise<void> {
  const { values, positionals } = parse(args, {
    url: { type: "string", default: env.RECEIPTS_URL || defaultUrl },
    "api-key": { type: "string", default: env.RECEIPTS_API_KEY ?? "" },
    events: { type: "string", default: "*" },
    description: { type: "string", default: "" },
    "signing-key": { type: "boolean", default: false },
    after: { type: "string", default: "" },
    "page-size": { type: "string", default: "" },
    "page-token": { type: "string", default: "" },
    json: { type: "boolean", default: false },
  });
  const [command, first, second] = positionals;
  const apiKey = String(values["api-key"]);
  if (apiKey === "")
    throw new UsageError("webhooks needs --api-key (or RECEIPTS_API_KEY): the tenant's API key.");
  const run: Run = {
    values,
    first,
    second,
    call: restCaller(String(values.url), apiKey),
    emit: (value, text) => out.write(values.json ? `${JSON.stringify(value, null, 2)}\n` : text),
    need: (value, what) => {
      if (value === undefined || value === "") throw new UsageError(`webhooks ${command} needs ${what}.`);
      return value;
    },
  };
  const handler = command === undefined ? undefined : COMMANDS[command];
  if (handler === undefined) throw new UsageError(`Unknown webhooks command "${command ?? ""}".`);
  await handler(run);
}

const id = encodeURIComponent;

/** The subcommands, by name. */
const COMMANDS: Record<string, (run: Run) => Promise<void>> = {
  async create({ values, first, call, emit, need }) {
    const events = String(values.events)
      .split(",")
      .map((e) => e.trim())
      .filter((e) => e !== "");
    const body = { url: need(first, "the endpoint's URL"), events, description: String(values.description) };
    const e = await call<EndpointView>("POST", "/webhooks/endpoints", body);
    emit(e, `${endpointLine(e)}secret (shown once, keep it): ${e.secret}\n`);
  },
  async list({ call, emit }) {
    const { endpoints } = await call<{ endpoints: EndpointView[] }>("GET", "/webhooks/endpoints");
    emit(endpoints, endpoints.map(endpointLine).join("") || "no endpoints\n");
  },
  async delete({ first, call, emit, need }) {
    await call("DELETE", `/webhooks/endpoints/${id(need(first, "an endpointId"))}`);
    emit({ deleted: first }, `deleted ${first}\n`);
  },
  async rotate({ values, first, call, emit, need }) {
    const path = `/webhooks/endpoints/${id(need(first, "an endpointId"))}/rotate-secret`;
    const e = await call<EndpointView>("POST", path, { rotateSigningKey: values["signing-key"] === true });
    const until = e.previousSecretExpiresAt
      ? ` (the previous one signs until ${e.previousSecretExpiresAt})`
      : "";
    emit(e, `${endpointLine(e)}new secret (shown once, keep it): ${e.secret}${until}\n`);
  },
  async deliveries({ values, first, call, emit, need }) {
    const query = new URLSearchParams({ endpointId: need(first, "an endpointId") });
    if (values["page-token"] !== "") query.set("pageToken", String(values["page-token"]));
    const page = await call<{ deliveries: Record<string, unknown>[]; nextPageToken?: string }>(
      "GET",
      `/webhooks/deliveries?${query}`,
    );
    const lines = page.deliveries.map(
      (d) => `${d.eventId}  ${d.eventType}  ${d.status}  attempts=${d.attempts}\n`,
    );
    const next = page.nextPageToken ? `next page: --page-token ${page.nextPageToken}\n` : "";
    emit(page, `${lines.join("") || "no deliveries\n"}${next}`);
  },
  async replay({ first, second, call, emit, need }) {
    const path = `/webhooks/endpoints/${id(need(first, "an endpointId"))}/replay`;
    const d = await call<Record<string, unknown>>("POST", path, { eventId: need(second, "an eventId") });
    emit(d, `replaying ${d.eventId} to ${d.endpointId}\n`);
  },
  async events({ values, call, emit }) {
    const query = new URLSearchParams();
    if (values.after !== "") query.set("after", String(values.after));
    if (values["page-size"] !== "") query.set("pageSize", String(values["page-size"]));
    const page = await call<{
      events: { id: string; type: string; timestamp: string }[];
      lastEventId?: string;
    }>("GET", `/events${query.size > 0 ? `?${query}` : ""}`);
    const lines = page.events.map((e) => `${e.id}  ${e.timestamp}  ${e.type}\n`);
    const next = page.lastEventId ? `next: --after ${page.lastEventId}\n` : "";
    emit(page, `${lines.join("") || "no events\n"}${next}`);
  },
};
