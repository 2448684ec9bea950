/**
 * Which of a page's stored base64 texts are known to be canonical (the standard base64 that
 * `Buffer#toString("base64")` writes of their own bytes), so that a REST answer can put them between
 * quotes without decoding each one again on every read to prove it (test/rpc/receipt-page.test.ts).
 * A store proves a text once, where it knows it: the MongoDB store's texts read from BSON binary are
 * encoded by it, the memory store's are checked on their first listing and remembered while they last.
 * The proof is a page's, kept beside it (a page object the store just made), one entry per record in
 * the page's order; a reader takes a record's text as proven only when it is the very text proven, so
 * a record changed or moved after its page was read is merely checked again.
 */

import { isCanonicalBase64 } from "../base64-text.js";
import type { ReceiptPage } from "./types.js";

/** The sealed parts' texts of one record, each canonical standard base64. */
export interface SealedTexts {
  readonly encryptedAesKey: string;
  readonly encapsulatedKey: string | undefined;
  readonly ciphertext: string;
  readonly iv: string;
  readonly authTag: string;
}

/** Per page, per record in its order: its proven texts, or undefined where none were proven. */
export type PageProofs = readonly (SealedTexts | undefined)[];

const proofs = new WeakMap<ReceiptPage, PageProofs>();

/** `page`, with `texts` remembered as its records' proven texts (the caller proved each). */
export function withSealedTexts(page: ReceiptPage, texts: PageProofs): ReceiptPage {
  proofs.set(page, texts);
  return page;
}

/** The proven texts of `page`'s records, when its store gave any. */
export function sealedTextsOf(page: ReceiptPage): PageProofs | undefined {
  return proofs.get(page);
}

/** A record's sealed texts as they were checked, and whether every one of them is canonical. */
export interface CheckedTexts extends SealedTexts {
  readonly canonical: boolean;
}

/** `parts`' sealed texts (a new object), checked. */
export function checkSealedTexts(parts: SealedTexts): CheckedTexts {
  return {
    encryptedAesKey: parts.encryptedAesKey,
    encapsulatedKey: parts.encapsulatedKey,
    ciphertext: parts.ciphertext,
    iv: parts.iv,
    authTag: parts.authTag,
    canonical:
      isCanonicalBase64(parts.ciphertext) &&
      isCanonicalBase64(parts.iv) &&
      isCanonicalBase64(parts.authTag) &&
      isCanonicalBase64(parts.encryptedAesKey) &&
      (parts.encapsulatedKey === undefined || isCanonicalBase64(parts.encapsulatedKey)),
  };
}

/** Whether `a` and `b` hold the same sealed texts. */
export function isSameTexts(a: SealedTexts, b: SealedTexts): boolean {
  return (
    a.ciphertext === b.ciphertext &&
    a.iv === b.iv &&
    a.authTag === b.authTag &&
    a.encryptedAesKey === b.encryptedAesKey &&
    a.encapsulatedKey === b.encapsulatedKey
  );
}
