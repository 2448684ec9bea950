/**
 * What a developer writes with the installed package (test/client/package.test.ts type-checks it in
 * an empty project and runs it against a running service): an issuer registers a card's device key,
 * a merchant registers a signing key and sends signed receipts, the device lists and opens them, and
 * the errors a payment can meet are read from the error object. Prints what it saw as JSON.
 */
import {
  createReceiptsClient,
  generateSigningKey,
  openReceipt,
  ReceiptsApiError,
  type ReceiptsClient,
} from "receipt-encryption-client";
import { createReceiptsClient as createNodeClient } from "receipt-encryption-client/node";

const baseUrl = process.env.BASE_URL ?? "http://127.0.0.1:8080";
const suffix = process.env.SUFFIX ?? "1";
const issuer: ReceiptsClient = createNodeClient({
  baseUrl,
  apiKey: process.env.ISSUER_KEY ?? "",
  transport: "grpc",
});
const merchant: ReceiptsClient = createReceiptsClient({ baseUrl, apiKey: process.env.MERCHANT_KEY ?? "" });
const subtle = globalThis.crypto.subtle;

const hex = (bytes: ArrayBuffer) =>
  [...new Uint8Array(bytes)].map((b) => b.toString(16).padStart(2, "0")).join("");
const base64 = (bytes: ArrayBuffer) => btoa(String.fromCharCode(...new Uint8Array(bytes)));

// The cardholder's device makes its key; only the public half leaves it.
const device = await subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, false, ["deriveBits"]);
const hashedPan = hex(
  await subtle.digest("SHA-256", new TextEncoder().encode(`40000000000${suffix.padStart(5, "0")}`)),
);
const keyId = crypto.randomUUID();
const user = await issuer.register({
  hashedPan,
  keyId,
  publicKey: base64(await subtle.exportKey("spki", device.publicKey)),
});

// The merchant signs its receipts from now on.
const merchantId = `sample-shop-${suffix}`;
const signingKey = await generateSigningKey();
const registered = await merchant.registerSigningKey({ merchantId, publicKey: signingKey.publicKey });
const signer = { merchantKeyId: registered.merchantKeyId, privateKey: signingKey.privateKey };
const receipt = {
  receiptId: `r-${suffix}`,
  merchantId,
  merchantName: "Sample Shop",
  transactionId: `t-${suffix}`,
  transactionDate: { seconds: BigInt(Math.floor(Date.now() / 1000) - 60), nanos: 0 },
  currency: "eur",
  recipientHashedPan: hashedPan,
  amount: 450n,
  items: [{ lineItemId: "1", name: "Espresso", quantity: 2n, unitPrice: 225n, totalPrice: 450n }],
};
const payment = await merchant.createPayment("gateway_a", receipt, { signer });

// What a payment can meet, read from the error.
async function failure(run: () => Promise<unknown>) {
  try {
    await run();
    return undefined;
  } catch (err) {
    if (!(err instanceof ReceiptsApiError)) throw err;
    return { code: err.code, docUrl: err.docUrl, declineCode: err.declineCode, paymentId: err.paymentId };
  }
}
const twice = await failure(() =>
  merchant.createPayment("gateway_a", { ...receipt, receiptId: `r2-${suffix}` }, { signer }),
);
const declined = await failure(() =>
  merchant.createPayment(
    "gateway_b",
    {
      ...receipt,
      receiptId: `r3-${suffix}`,
      transactionId: `t3-${suffix}`,
      cardNonce: "cnon:card-nonce-insufficient-funds",
    },
    { signer },
  ),
);
// Without its signature, once the merchantId has a signing key (a receipt alone has no amount).
const { amount: _paymentsOnly, ...alone } = receipt;
const unsigned = await failure(() =>
  merchant.encryptReceipt({ ...alone, receiptId: `r4-${suffix}`, transactionId: `t4-${suffix}` }),
);
const signedAlone = await merchant.encryptReceipt(
  { ...alone, receiptId: `r5-${suffix}`, transactionId: `t5-${suffix}` },
  { signer },
);

// The device lists the sealed receipts (through the issuer) and opens them with its own key.
const listed = await issuer.listReceipts(user.userId);
const opened = await Promise.all(listed.receipts.map((sealed) => openReceipt(sealed, device)));

console.log(
  JSON.stringify({
    paymentId: payment.paymentId,
    encrypted: signedAlone.receiptId,
    opened: opened.map((r) => {
      const sealed: Record<string, unknown> = { ...r };
      return {
        receiptId: r.receiptId,
        items: r.items?.map((i) => i.name),
        merchantKeyId: sealed.merchantKeyId,
        signed: typeof sealed.merchantSignature === "string" && sealed.merchantSignature.length > 0,
      };
    }),
    twice,
    declined,
    unsigned,
  }),
);
