/**
 * The browser test's page script (bundled by esbuild in the test, run in Chromium): a cardholder's
 * app in a browser. It makes a non-extractable key pair with WebCrypto, registers the public key with
 * the project's client over the Connect web transport, has the merchant create a payment with a
 * receipt for that card (split tender, tip, tax per rate) and refunds part of it with a refund
 * receipt, lists the user's sealed receipts, opens both on the device with `openReceipt` and draws
 * both with `renderReceiptSvg`, reading back what the browser drew. Written without DOM types (the project's
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
  /** The two receipts as drawn on the page: the sale's and its refund's. */
  images: { sale: DrawnReceipt; refund: DrawnReceipt };
}

/** A receipt image as the browser drew it: its lines of text, and how dark two of its lines are. */
export interface DrawnReceipt {
  /** Each line of the image: the texts of one row, joined by a space. */
  lines: string[];
  /**
   * The share of dark pixels in the box of the line reading `banner` (the inverted REFUND banner of a
   * refund; for the sale, its TOTAL line) and of the plain "Thank you!" line, as rendered to a canvas.
   */
  dark: { banner: number; plain: number };
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

interface MiniRect {
  x: number;
  y: number;
  width: number;
  height: number;
}
interface MiniElement {
  textContent: string | null;
  innerHTML: string;
  setAttribute(name: string, value: string): void;
  querySelector(selector: string): MiniElement | null;
  querySelectorAll(selector: string): ArrayLike<MiniElement>;
  getBoundingClientRect(): MiniRect;
}
interface MiniContext {
  drawImage(image: unknown, x: number, y: number): void;
  getImageData(x: number, y: number, width: number, height: number): { data: Uint8ClampedArray };
}
interface MiniImage {
  src: string;
  width: number;
  height: number;
  decode(): Promise<void>;
}
interface MiniDocument {
  getElementById(id: string): MiniElement | null;
  createElement(tag: "canvas"): {
    width: number;
    height: number;
    getContext(kind: "2d"): MiniContext | null;
  };
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
  const receiptId = `web-r-${config.suffix}`;
  const common = {
    merchantId: `web-m-${config.suffix}`,
    merchantName: "Corner Coffee",
    merchantStreet: "1 Market Street",
    merchantCity: "Dublin",
    merchantPostalCode: "D01 X2Y3",
    transactionTimezone: "Europe/Dublin",
    currency: "EUR",
    recipientHashedPan: hashedPan,
    mockItems: false,
  };
  const payment = await merchant.createPayment("gateway_a", {
    ...common,
    receiptId,
    transactionId: `web-t-${config.suffix}`,
    transactionDate: timestampFromDate(new Date("2026-11-21T09:30:00Z")),
    amount: 1295n,
    cardBrand: "VISA",
    cardLast4: pan.slice(-4),
    paymentMethod: "Card",
    items: [
      { lineItemId: "1", name: "Flat white", quantity: 2n, unitPrice: 350n, totalPrice: 700n },
      { lineItemId: "2", name: "Croissant", quantity: 1n, unitPrice: 250n, totalPrice: 250n },
    ],
    subtotal: 950n,
    taxAmount: 195n,
    tipAmount: 150n,
    totalAmount: 1295n,
    tenders: [
      { method: "gift_card", amount: 295n },
      { method: "card", cardBrand: "VISA", cardLast4: pan.slice(-4), amount: 1000n },
    ],
    taxBreakdown: [
      { rate: 0.23, taxableAmount: 700n, taxAmount: 161n },
      { rate: 0.135, taxableAmount: 250n, taxAmount: 34n },
    ],
    cardAcceptorName: "CORNER COFFEE DUBLIN",
    authorizationCode: "A1B2C3",
  });

  show("status", "The merchant refunds the croissant, with a refund receipt...");
  await merchant.refundPayment(payment.paymentId, {
    ...common,
    receiptId: `web-refund-${config.suffix}`,
    transactionId: `web-rt-${config.suffix}`,
    transactionDate: timestampFromDate(new Date("2026-11-21T10:15:00Z")),
    receiptType: "refund",
    originalReceiptId: receiptId,
    amount: 250n,
    items: [{ lineItemId: "2", name: "Croissant", quantity: 1n, unitPrice: 250n, totalPrice: 250n }],
    totalAmount: 250n,
    tenders: [{ method: "card", cardBrand: "VISA", cardLast4: pan.slice(-4), amount: 250n }],
  });

  show("status", "Listing the user's receipts and opening them on this device...");
  const listing = await issuer.listReceipts(user.userId);
  const opened = await Promise.all(listing.receipts.map((sealed) => openReceipt(sealed, keys.privateKey)));
  const sale = opened.find((r) => r.receiptId === receiptId);
  const refund = opened.find((r) => r.receiptType === "refund");
  if (sale === undefined || refund === undefined) throw new Error("the sale or its refund is missing");
  const svg = renderReceiptSvg(sale);
  const images = {
    sale: await draw("receipt", svg, "TOTAL"),
    refund: await draw("refund", renderReceiptSvg(refund), "REFUND"),
  };
  show(
    "status",
    `Opened ${sale.receiptId} with a non-extractable ${config.algorithm} key ` +
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
      receiptId: sale.receiptId,
      merchantName: sale.merchantName,
      items: (sale.items ?? []).map((item) => item.name),
      currency: sale.currency,
    },
    svgLength: svg.length,
    images,
  };
}

/**
 * Puts an SVG receipt on the page (in the element `id`), reads its lines as drawn, and renders it to
 * a canvas to measure how dark the line starting with `banner` and the "Thank you!" line are: an
 * inverted line (white on black) is mostly dark, plain text mostly light.
 */
async function draw(id: string, svg: string, banner: string): Promise<DrawnReceipt> {
  const holder = doc.getElementById(id);
  if (holder === null) throw new Error(`no #${id} on the page`);
  holder.innerHTML = svg;
  const image = holder.querySelector("svg");
  if (image === null) throw new Error("the receipt drew no SVG");
  const rows = Array.from(image.querySelectorAll("g")).filter((g) => g.querySelector("g") === null);
  const lines = rows
    .map((g) =>
      Array.from(g.querySelectorAll("text")).map((t) => (t.textContent ?? "").replace(/\u00a0/g, " ").trim()),
    )
    .map((texts) =>
      texts
        .filter((t) => t !== "")
        .join(" ")
        .replace(/\s+/g, " "),
    )
    .filter((line) => line !== "");
  const origin = image.getBoundingClientRect();
  const boxOf = (starts: string): MiniRect => {
    const row = rows.find((g) =>
      (g.textContent ?? "")
        .replace(/\u00a0/g, " ")
        .trim()
        .startsWith(starts),
    );
    if (row === undefined) throw new Error(`no line starting with ${starts}`);
    const box = row.getBoundingClientRect();
    return { x: box.x - origin.x, y: box.y - origin.y, width: box.width, height: box.height };
  };
  const pixels = await rendered(svg);
  return {
    lines,
    dark: { banner: darkShare(pixels, boxOf(banner)), plain: darkShare(pixels, boxOf("Thank you!")) },
  };
}

/** The SVG drawn on a canvas of its own size, for reading its pixels. */
async function rendered(svg: string): Promise<MiniContext> {
  const Image = (globalThis as unknown as { Image: new () => MiniImage }).Image;
  const image = new Image();
  image.src = `data:image/svg+xml;base64,${base64(new TextEncoder().encode(svg).buffer as ArrayBuffer)}`;
  await image.decode();
  const canvas = doc.createElement("canvas");
  canvas.width = image.width;
  canvas.height = image.height;
  const context = canvas.getContext("2d");
  if (context === null) throw new Error("no 2d canvas");
  context.drawImage(image, 0, 0);
  return context;
}

/** The share of the pixels of `box` darker than mid-grey (transparent counts as the white paper). */
function darkShare(context: MiniContext, box: MiniRect): number {
  const width = Math.max(1, Math.round(box.width));
  const height = Math.max(1, Math.round(box.height));
  const { data } = context.getImageData(Math.round(box.x), Math.round(box.y), width, height);
  let dark = 0;
  for (let i = 0; i < data.length; i += 4) {
    const alpha = (data[i + 3] ?? 0) / 255;
    const luma =
      (0.299 * (data[i] ?? 0) + 0.587 * (data[i + 1] ?? 0) + 0.114 * (data[i + 2] ?? 0)) * alpha +
      255 * (1 - alpha);
    if (luma < 128) dark++;
  }
  return dark / (width * height);
}

(globalThis as unknown as { runFlow: typeof runFlow }).runFlow = runFlow;
show("status", "Ready.");
