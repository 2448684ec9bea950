import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { toBase64 } from "../kt/base64.js";
import { type Json, receiptJsonOf, signingTextOf } from "../receipt-fields.js";
import type { WebCryptoKey } from "./client-keys.js";

/**
 * The merchant's side of receipt signatures, with WebCrypto's Ed25519: make a signing key, register
 * its public half (`client.registerSigningKey`), and sign each receipt. Once a merchantId has a
 * registered key, the service refuses its unsigned receipts; the signature is sealed inside the
 * receipt, so the cardholder's app can check on the device that the merchant wrote it.
 *
 * The signature covers the receipt as JSON in its REST form, without the fields that are instructions
 * to the service (`recipientHashedPan`, `mockItems`, `cardNonce`, `cardBin`) and without empty members,
 * in RFC 8785 canonical form (`signingTextOf`). The client signs for you when a create is given a
 * `signer`; `signReceipt` is for callers that send the `X-Receipt-Signature` header themselves.
 */

/** A merchant's Ed25519 signing key, registered with the service under `merchantKeyId`. */
export interface MerchantSigner {
  /** The `mk_...` id the service gave the public key (`registerSigningKey`). */
  merchantKeyId: string;
  /** The Ed25519 private key (a WebCrypto key: it may be non-extractable). */
  privateKey: WebCryptoKey;
}

/** A new signing key pair: the private key to sign with, the public key to register. */
export interface SigningKeyPair {
  /** Keep it; non-extractable unless asked otherwise, so it cannot be exported by mistake. */
  privateKey: WebCryptoKey;
  /** Base64 of the DER SubjectPublicKeyInfo, as `registerSigningKey` takes it. */
  publicKey: string;
}

/** A receipt as the client's creates take it: the generated `Receipt` init shape (money as `bigint`). */
export type ReceiptInput = MessageInitShape<typeof ReceiptSchema>;

/**
 * Makes an Ed25519 signing key pair with WebCrypto. `extractable: true` lets the private key be
 * exported (to store it in a secrets manager); by default it cannot leave the WebCrypto key object.
 */
export async function generateSigningKey(options: { extractable?: boolean } = {}): Promise<SigningKeyPair> {
  const subtle = globalThis.crypto.subtle;
  const pair = (await subtle.generateKey({ name: "Ed25519" }, options.extractable === true, [
    "sign",
    "verify",
  ])) as { privateKey: WebCryptoKey; publicKey: WebCryptoKey };
  const spki = new Uint8Array(await subtle.exportKey("spki", pair.publicKey));
  return { privateKey: pair.privateKey, publicKey: toBase64(spki) };
}

/**
 * A receipt made ready to sign as the service will seal it: `version` "1.0" when unset and the
 * currency upper-cased (the service seals them so, and a signature over anything else would not
 * match what the cardholder opens).
 */
export function signableReceipt(receipt: ReceiptInput): ReceiptInput {
  return {
    ...receipt,
    version: receipt.version === undefined || receipt.version === "" ? "1.0" : receipt.version,
    ...(receipt.currency === undefined ? {} : { currency: receipt.currency.toUpperCase() }),
  };
}

/**
 * The base64 Ed25519 signature of a receipt message (as the client's creates take it), for the
 * `X-Receipt-Signature` header: over its REST JSON form.
 */
export function signReceipt(receipt: ReceiptInput, privateKey: WebCryptoKey): Promise<string> {
  return signReceiptJson(receiptJsonOf(create(ReceiptSchema, receipt)), privateKey);
}

/**
 * The base64 Ed25519 signature of a receipt given as JSON in the REST form (a request body as it is
 * sent: money as numbers, dates as RFC 3339 strings).
 */
export async function signReceiptJson(
  receipt: { [name: string]: Json | undefined },
  privateKey: WebCryptoKey,
): Promise<string> {
  const text = new TextEncoder().encode(signingTextOf(receipt));
  const signature = await globalThis.crypto.subtle.sign("Ed25519", privateKey, text);
  return toBase64(new Uint8Array(signature));
}
