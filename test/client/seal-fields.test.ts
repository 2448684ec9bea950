import { generateKeyPairSync } from "node:crypto";
import { describe, expect, it } from "vitest";
import { openReceipt, sealReceipt } from "../../src/client/webcrypto.js";
import { INPUT_ONLY_FIELDS } from "../../src/receipt-fields.js";

/**
 * What a merchant seals on its side is what the service would seal: never the input-only
 * instructions to the service (the card's hashed PAN and BIN, the nonce, the mock-items switch).
 */
describe("sealReceipt", () => {
  it("leaves every input-only field out of the sealed plaintext, cardBin included", async () => {
    const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const publicKey = pair.publicKey.export({ type: "spki", format: "der" }).toString("base64");
    const privateKey = pair.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64");
    const receipt = {
      receiptId: "r-1",
      merchantId: "m-1",
      merchantName: "Corner Coffee",
      transactionId: "t-1",
      transactionDate: "2026-11-21T09:30:00Z",
      currency: "EUR",
      recipientHashedPan: "ab".repeat(32),
      cardBin: "41111111",
      cardNonce: "cnon:card-nonce-ok",
      mockItems: false,
    };
    const opened = (await openReceipt(
      await sealReceipt(receipt, publicKey, { keyId: "k" }),
      privateKey,
    )) as unknown as Record<string, unknown>;
    expect(opened.merchantName).toBe("Corner Coffee");
    expect(INPUT_ONLY_FIELDS).toContain("cardBin");
    for (const field of INPUT_ONLY_FIELDS) expect(opened, field).not.toHaveProperty(field);
  });
});
