import { createHash, randomUUID } from "node:crypto";

/** Where the demo runs and with which keys. */
export interface DemoOptions {
  baseUrl: string;
  /** Where `baseUrl` came from (`--url`, `RECEIPTS_URL`, the default), said when it cannot be reached. */
  urlSource?: string;
  issuerKey: string;
  merchantKey: string;
  out: NodeJS.WritableStream;
  /**
   * Print one JSON document at the end instead of text as it goes: `{card, steps: [{title, request,
   * response}], result}`, secrets masked as in the text, long values whole.
   */
  json?: boolean;
}

/** One call of the demo as `--json` prints it. */
interface DemoStep {
  title: string;
  request: { method: string; path: string; body?: unknown };
  response: { status: number; body: unknown };
}

/** A failed demo step; the message says which and why. */
export class DemoError extends Error {}

/** Fields printed as `[masked]`: secrets a terminal recording must not keep. */
const MASKED = new Set(["privateKey", "tokenId", "accessTokenId", "clientSecret"]);

/** One REST call of the demo: prints the request and the response, returns the response's `data`. */
type Call = (
  title: string,
  key: string,
  path: string,
  body?: unknown,
  headers?: Record<string, string>,
) => Promise<Record<string, unknown>>;

/** One demo run: how it calls the server, with which keys, and the suffix that keeps its ids unique. */
interface Run {
  call: Call;
  issuerKey: string;
  merchantKey: string;
  suffix: string;
  /** Where text goes: `out`, or nowhere with `--json`. */
  say: (text: string) => void;
}

/**
 * Runs the five steps of the flow plus escrow against a running server over REST, printing each
 * request and response (secrets masked). Uses fresh random test card numbers, so it can run repeatedly.
 */
export async function runDemo(options: DemoOptions): Promise<void> {
  const { issuerKey, merchantKey, out } = options;
  const steps: DemoStep[] = [];
  const say = options.json === true ? () => {} : (text: string) => out.write(text);
  const run: Run = {
    call: restCaller(options, say, steps),
    issuerKey,
    merchantKey,
    say,
    suffix: randomUUID().slice(0, 8),
  };
  const pan = testCardNumber(run.suffix);
  const card = `${pan.slice(0, 4)}...${pan.slice(-4)}`;
  say(`Test card ${card}; the service only ever sees SHA-256(PAN).\n`);
  const receipt = await runFlow(run, sha256(pan));
  const result = await runEscrow(run, sha256(`${pan}-later`), receipt);
  if (options.json === true) out.write(`${JSON.stringify({ card, steps, result }, masked, 2)}\n`);
}

/**
 * The demo's REST client: says each call, and keeps it in `steps`. A server that cannot be reached, or
 * a step that does not answer `success: true` with 2xx, ends the demo with a {@link DemoError} saying
 * what to do or which step failed.
 */
function restCaller(
  { baseUrl, urlSource = "--url" }: DemoOptions,
  say: (text: string) => void,
  steps: DemoStep[],
): Call {
  const api = `${baseUrl.replace(/\/$/, "")}/api/v1`;
  return async (title, key, path, body, headers = {}) => {
    const method = body === undefined ? "GET" : "POST";
    say(`\n== ${title}\n${method} ${path}\n`);
    if (body !== undefined) say(`${show(body)}\n`);
    const res = await fetch(`${api}${path}`, {
      method,
      headers: {
        "x-api-key": key,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
        ...headers,
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    }).catch((err: unknown) => {
      throw new DemoError(
        `cannot connect to ${baseUrl} (${urlSource}): ${causeOf(err)}. Is the server running there? ` +
          "Start it with npm start, or give its address with --url (or RECEIPTS_URL).",
      );
    });
    const json = (await res.json().catch(() => ({}))) as {
      success?: boolean;
      data?: Record<string, unknown>;
    };
    say(`-> ${res.status}\n${show(json)}\n`);
    steps.push({
      title,
      request: { method, path, ...(body === undefined ? {} : { body }) },
      response: { status: res.status, body: json },
    });
    if (!res.ok || json.success !== true || json.data === undefined) {
      throw new DemoError(`step "${title}" failed with HTTP ${res.status}`);
    }
    return json.data;
  };
}

/** A 16-digit test card number starting 4111, its other digits taken from the run's random suffix. */
function testCardNumber(suffix: string): string {
  return `4111${suffix
    .replace(/[^0-9]/g, "7")
    .padEnd(12, "0")
    .slice(0, 12)}`;
}

/**
 * Steps 1 to 5 for the card whose hash is `hashedPan`: keys, registration, a payment with a sealed
 * receipt, a grant, the decryption. Returns the receipt it paid with, which escrow reuses.
 */
async function runFlow({ call, issuerKey, merchantKey, suffix }: Run, hashedPan: string) {
  const keys = await call("1. Issuer: generate a key pair", issuerKey, "/onboarding/generate-keys", {});
  const user = await call(
    "2. Issuer: register the public key under the hashed PAN",
    issuerKey,
    "/onboarding/register",
    {
      hashedPan,
      publicKey: keys.publicKey,
      keyId: keys.keyId,
    },
  );
  const receipt = demoReceipt(suffix, hashedPan);
  const payment = await call(
    "3. Merchant: create a payment with a sealed receipt",
    merchantKey,
    "/payments/gateway_a/create",
    receipt,
    {
      "idempotency-key": randomUUID(),
    },
  );
  const grant = await call(
    '4. Issuer: the user taps "View receipt" -> a short grant',
    issuerKey,
    "/keys/grant-access",
    {
      userId: user.userId,
      keyId: keys.keyId,
    },
  );
  await call("5. Issuer: decrypt the payment's receipt", issuerKey, "/payments/decrypt", {
    paymentId: payment.paymentId,
    tokenId: grant.tokenId,
    privateKey: keys.privateKey,
  });
  return receipt;
}

/** The coffee-shop receipt of the demo, dated now, for the card whose hash is `hashedPan`. */
function demoReceipt(suffix: string, hashedPan: string) {
  return {
    receiptId: `demo-r-${suffix}`,
    merchantId: "demo-merchant",
    merchantName: "Demo Coffee",
    transactionId: `demo-t-${suffix}`,
    transactionDate: new Date().toISOString().replace(/\.\d{3}Z$/, "Z"),
    currency: "EUR",
    recipientHashedPan: hashedPan,
    amount: 950,
    items: [
      { lineItemId: "1", name: "Flat white", quantity: 2, unitPrice: 350, totalPrice: 700 },
      { lineItemId: "2", name: "Croissant", quantity: 1, unitPrice: 250, totalPrice: 250 },
    ],
  };
}

/**
 * Escrow: a copy of `receipt` (without amount) sealed for `laterPan`, a card nobody registered yet, is
 * released by registering that card, and the user's list shows the same ciphertext.
 */
async function runEscrow(
  { call, issuerKey, merchantKey, suffix, say }: Run,
  laterPan: string,
  receipt: ReturnType<typeof demoReceipt>,
): Promise<{ escrowed: boolean; released: number; ciphertextUnchanged: boolean }> {
  const escrowed = await call(
    "Escrow: a receipt for a card nobody registered yet",
    merchantKey,
    "/receipts/encrypt",
    {
      ...receipt,
      amount: undefined,
      receiptId: `demo-e-${suffix}`,
      transactionId: `demo-e-${suffix}`,
      recipientHashedPan: laterPan,
    },
  );
  const laterKeys = await call(
    "Escrow: the card's issuer generates a key pair",
    issuerKey,
    "/onboarding/generate-keys",
    {},
  );
  const released = await call(
    "Escrow: registering the card releases the receipt",
    issuerKey,
    "/onboarding/register",
    {
      hashedPan: laterPan,
      publicKey: laterKeys.publicKey,
      keyId: laterKeys.keyId,
    },
  );
  const listed = await call(
    "Escrow: the user's receipts, now sealed to the user's key",
    issuerKey,
    `/receipts/${String(released.userId ?? "")}`,
  );
  const first = (listed.receipts as Array<Record<string, unknown>> | undefined)?.[0];
  const result = {
    escrowed: escrowed.isEscrowed === true,
    released: Number(released.releasedReceipts ?? 0),
    ciphertextUnchanged: first?.ciphertext === escrowed.ciphertext,
  };
  say(
    `\nDone: escrowed=${result.escrowed}, released=${result.released}, ` +
      `ciphertext unchanged=${result.ciphertextUnchanged}.\n`,
  );
  return result;
}

/** The reason a fetch failed: Node's "fetch failed" hides it in `cause` (e.g. ECONNREFUSED). */
function causeOf(err: unknown): string {
  const cause =
    err instanceof Error ? (err.cause as { code?: string; message?: string } | undefined) : undefined;
  return cause?.code ?? cause?.message ?? (err instanceof Error ? err.message : String(err));
}

/** A `JSON.stringify` replacer that masks the secrets of {@link MASKED}. */
function masked(key: string, value: unknown): unknown {
  return MASKED.has(key) && typeof value === "string" ? "[masked]" : value;
}

/** Pretty JSON with secrets masked and long base64 values shortened. */
function show(value: unknown): string {
  return JSON.stringify(
    value,
    (key, v: unknown) => {
      const shown = masked(key, v);
      if (typeof shown === "string" && shown.length > 72)
        return `${shown.slice(0, 40)}... (${shown.length} chars)`;
      return shown;
    },
    2,
  );
}

function sha256(value: string): string {
  return createHash("sha256").update(value).digest("hex");
}
