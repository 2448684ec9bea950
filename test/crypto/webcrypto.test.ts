import { describe, expect, it } from "vitest";
import { receiptAad, sealReceipt } from "../../src/crypto/envelope.js";
import { generateRsaKeyPair, parsePublicKey } from "../../src/crypto/keys.js";

/**
 * Anyone holding the private key can open an envelope with standard WebCrypto. This
 * decrypts with `crypto.subtle` only, so it also proves that Node's RSA-OAEP uses SHA-256 for MGF1
 * (WebCrypto's RSA-OAEP with hash SHA-256 always does) and that the tag/AAD layout is the standard one.
 */
describe("a sealed receipt opened with WebCrypto only", () => {
  it("decrypts with the base64 PKCS#8 private key from generate-keys", async () => {
    const pair = await generateRsaKeyPair();
    const identity = { version: "1.0", receiptId: "r-1", merchantId: "m-1", transactionId: "t-1" };
    const receipt = {
      receiptId: "r-1",
      merchantName: "Bäckerei",
      items: [{ name: "Brezel", totalPrice: 120 }],
    };
    const sealed = sealReceipt(
      Buffer.from(JSON.stringify(receipt)),
      receiptAad(identity),
      parsePublicKey(pair.publicKey).key,
    );

    const { subtle } = globalThis.crypto;
    const fromBase64 = (text: string) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
    const privateKey = await subtle.importKey(
      "pkcs8",
      fromBase64(pair.privateKey),
      { name: "RSA-OAEP", hash: "SHA-256" },
      false,
      ["decrypt"],
    );
    const rawAesKey = await subtle.decrypt(
      { name: "RSA-OAEP" },
      privateKey,
      fromBase64(sealed.encryptedAesKey.toString("base64")),
    );
    expect(rawAesKey.byteLength).toBe(32);
    const aesKey = await subtle.importKey("raw", rawAesKey, { name: "AES-GCM" }, false, ["decrypt"]);
    const additionalData = new TextEncoder().encode(
      `${identity.version}\n${identity.receiptId}\n${identity.merchantId}\n${identity.transactionId}`,
    );
    const ciphertextAndTag = new Uint8Array([
      ...fromBase64(sealed.ciphertext.toString("base64")),
      ...fromBase64(sealed.authTag.toString("base64")),
    ]);
    const plaintext = await subtle.decrypt(
      { name: "AES-GCM", iv: fromBase64(sealed.iv.toString("base64")), additionalData, tagLength: 128 },
      aesKey,
      ciphertextAndTag,
    );
    expect(JSON.parse(new TextDecoder().decode(plaintext))).toEqual(receipt);
  });
});
