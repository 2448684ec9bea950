import { createKeyTrust, type KeyTrust } from "../src/client/key-trust.js";
import { type ReceiptJson, sealReceipt } from "../src/client/webcrypto.js";
import { compare, NOW, world } from "./kt-world.js";

/**
 * The merchant's cost of verifying before sealing, per receipt, on one core, through the client
 * library as a merchant calls it: `sealReceipt` to the answer's bare key (today's path) against
 * `sealReceipt` with the answer and a `KeyTrust` (checkpoint signatures and the snapshot cached, as a
 * merchant's long-lived KeyTrust has them), against a cold KeyTrust per receipt (snapshot fetched,
 * hashed, parsed, checkpoint verified: the first receipt after each new checkpoint), and each
 * verification alone. The snapshot is "fetched" from memory, so no network time is counted.
 * `npm run bench:kt-client`; KT_BENCH_SIZES=1000 narrows a run.
 */

const RECEIPT: ReceiptJson = {
  receiptId: "r-bench",
  merchantId: "m-bench",
  merchantName: "Bench Coffee",
  transactionId: "t-bench",
  transactionDate: "2026-11-25T11:00:00Z",
  currency: "EUR",
  items: [{ lineItemId: "1", name: "Espresso", quantity: 1, unitPrice: 250, totalPrice: 250 }],
};
const CARD = { hashedPan: "a".repeat(64), bin: "41111111" };

async function at(size: number): Promise<void> {
  const w = await world(size);
  const snapshot = w.input.directoryJson;
  const fetchSnapshot = (async () => new Response(snapshot, { status: 200 })) as typeof fetch;
  const newTrust = (): KeyTrust =>
    createKeyTrust({
      policy: w.policy.policy,
      baseUrl: "http://kt.example.com",
      fetch: fetchSnapshot,
      now: () => NOW,
    });
  const warm = newTrust();
  await warm.verify(w.answer, CARD);
  const one = (work: Promise<unknown>) => work.then(() => 1);
  await compare(`merchant's seal per CPU-second at ${size.toLocaleString("en")} leaves (HPKE P-256 key)`, [
    [
      "sealReceipt to the bare key (no verification)",
      () => one(sealReceipt(RECEIPT, w.answer.publicKey, { keyId: w.answer.keyId })),
    ],
    [
      "sealReceipt with the answer, KeyTrust warm",
      () => one(sealReceipt(RECEIPT, w.answer, { trust: warm, card: CARD })),
    ],
    [
      "sealReceipt with the answer, a cold KeyTrust each time",
      () => one(sealReceipt(RECEIPT, w.answer, { trust: newTrust(), card: CARD })),
    ],
    ["KeyTrust.verify alone, warm", () => one(warm.verify(w.answer, CARD))],
    ["KeyTrust.verify alone, cold", () => one(newTrust().verify(w.answer, CARD))],
  ]);
}

const only = process.env.KT_BENCH_SIZES;
for (const size of only === undefined ? [1_000, 1_000_000] : only.split(",").map(Number)) await at(size);
