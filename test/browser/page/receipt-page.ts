/**
 * The browser test's page script (bundled by esbuild in the test, run in Chromium): a cardholder's
 * app in a browser. It makes a non-extractable key pair with WebCrypto, registers the public key with
 * the project's client over the Connect web transport, has the merchant create a payment with a
 * receipt for that card, lists the user's sealed receipts, opens the newest on the device with
 * `openReceipt` and draws it with `renderReceiptSvg`. Written without DOM types (the project's
 * TypeScript setup has none): the few DOM calls go through the small interfaces below.
 */
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { createConnectTransport } from "@connectrpc/connect-web";
import { createReceiptsClient } from "../../../src/client/client.js";
import { renderReceiptSvg } from "../../../src/client/receipt-image.js";
import { openReceipt, type WebCryptoKey } from "../../../src/client/webcrypto.js";

/** What the test hands the page. */
export interface FlowConfig {
  baseUrl: string;
  issuerKey: string;
  merchantKey: string;
  /** The key suite: the one parameter to switch when the client library opens P-256 receipts. */
  algorithm: keyof typeof SUITES;
  suffix: string;
}

/** What the page reports back to the test. */
export interface FlowResult {
  algorithm: string;
  privateKeyExtractable: boolean;
  exportRefused: boolean;
  userId: string;
  paymentId: string;
  listed: number;
  opened: { receiptId: string; merchantName: string; items: string[]; currency: string };
  svgLength: number;
}

/**
 * WebCrypto parameters per key suite: a P-256 key as a phone's secure hardware would make it, or RSA.
 */
const SUITES = {
  "RSA-OAEP-256": {
    params: {
      name: "RSA-OAEP",
      modulusLength: 2048,
      publicExponent: new Uint8Array([1, 0, 1]),
      hash: "SHA-256",
    },
    usages: ["encrypt", "decrypt"],
  },
  "HPKE-P256-SHA256-A256GCM": {
    params: { name: "ECDH", namedCurve: "P-256" },
    usages: ["deriveBits"],
  },
} as const;

interface MiniElement {
  textContent: string | null;
  innerHTML: string;
  setAttribute(name: string, value: string): void;
}
interface MiniDocument {
  getElementById(id: string): MiniElement | null;
}
interface MiniCryptoKeyPair {
  publicKey: WebCryptoKey;
  privateKey: WebCryptoKey & { extractable: boolean };
}

const doc = (globalThis as unknown as { document: MiniDocument }).document;
const subtle = globalThis.crypto.subtle;

function show(id: string, text: string): void {
  const element = doc.getElementById(id);
  if (element !== null) element.textContent = text;
}

function base64(bytes: ArrayBuffer): string {
  let binary = "";
  for (const byte of new Uint8Array(bytes)) binary += String.fromCharCode(byte);
  return btoa(binary);
}

async function sha256Hex(text: string): Promise<string> {
  const digest = await subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** Runs the whole flow in the page; throws (rejecting the test's evaluate) on any failure. */
async function runFlow(config: FlowConfig): Promise<FlowResult> {
  const suite = SUITES[config.algorithm];
  // The issuer on the client's default transport (the Connect protocol over the browser's fetch), the
  // merchant on a transport of its choosing (Connect's web transport, JSON): both cross CORS.
  const issuer = createReceiptsClient({ baseUrl: config.baseUrl, apiKey: config.issuerKey });
  const merchant = createReceiptsClient({
    baseUrl: config.baseUrl,
    apiKey: config.merchantKey,
    transport: createConnectTransport({ baseUrl: config.baseUrl }),
  });

  show("status", "Generating a non-extractable key in the browser...");
  const keys = (await subtle.generateKey(suite.params, false, [
    ...suite.usages,
  ])) as unknown as MiniCryptoKeyPair;
  const exportRefused = await subtle.exportKey("pkcs8", keys.privateKey).then(
    () => false,
    () => true,
  );
  const publicKey = base64(await subtle.exportKey("spki", keys.publicKey));

  const pan = `4111${config.suffix.replace(/\D/g, "7").padEnd(12, "0").slice(0, 12)}`;
  const hashedPan = await sha256Hex(pan);
  show("status", "Registering the public key...");
  const user = await issuer.register({ hashedPan, publicKey, keyId: crypto.randomUUID() });

  show("status", "The merchant creates a payment with a receipt for this card...");
  const payment = await merchant.createPayment("gateway_a", {
    receiptId: `web-r-${config.suffix}`,
    merchantId: `web-m-${config.suffix}`,
    merchantName: "Corner Coffee",
    merchantStreet: "1 Market Street",
    merchantCity: "Dublin",
    merchantPostalCode: "D01 X2Y3",
    transactionId: `web-t-${config.suffix}`,
    transactionDate: timestampFromDate(new Date("2026-11-21T09:30:00Z")),
    transactionTimezone: "Europe/Dublin",
    currency: "EUR",
    recipientHashedPan: hashedPan,
    amount: 950n,
    cardBrand: "VISA",
    cardLast4: pan.slice(-4),
    paymentMethod: "Card",
    items: [
      { lineItemId: "1", name: "Flat white", quantity: 2n, unitPrice: 350n, totalPrice: 700n },
      { lineItemId: "2", name: "Croissant", quantity: 1n, unitPrice: 250n, totalPrice: 250n },
    ],
    mockItems: false,
  });

  show("status", "Listing the user's receipts and opening the newest on this device...");
  const listing = await issuer.listReceipts(user.userId);
  const newest = listing.receipts[0];
  if (newest === undefined) throw new Error("the listing is empty");
  const opened = await openReceipt(newest, keys.privateKey);

  const image = doc.getElementById("receipt");
  const svg = renderReceiptSvg(opened);
  if (image !== null) image.innerHTML = svg;
  show(
    "status",
    `Opened ${opened.receiptId} with a non-extractable ${config.algorithm} key ` +
      `(extractable: ${String(keys.privateKey.extractable)}).`,
  );
  return {
    algorithm: config.algorithm,
    privateKeyExtractable: keys.privateKey.extractable,
    exportRefused,
    userId: user.userId,
    paymentId: payment.paymentId,
    listed: listing.receipts.length,
    opened: {
      receiptId: opened.receiptId,
      merchantName: opened.merchantName,
      items: (opened.items ?? []).map((item) => item.name),
      currency: opened.currency,
    },
    svgLength: svg.length,
  };
}

(globalThis as unknown as { runFlow: typeof runFlow }).runFlow = runFlow;
show("status", "Ready.");
