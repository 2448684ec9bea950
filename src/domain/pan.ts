import { createHmac, createSecretKey, type KeyObject } from "node:crypto";
import type { Violations } from "../errors.js";

const HASHED_PAN = /^[0-9a-fA-F]{64}$/;

/** Whether `value` is a hashed PAN as the API accepts it: 64 hexadecimal characters, any case. */
export function isHashedPan(value: string): boolean {
  return HASHED_PAN.test(value);
}

/** Records a violation on `field` unless `value` is a hashed PAN. */
export function checkHashedPan(value: string, field: string, violations: Violations): void {
  if (value === "") violations.add(field, "is required");
  else if (!isHashedPan(value)) violations.add(field, "must be 64 hexadecimal characters");
}

/** A card BIN as merchants send it and BIN prefixes as issuers own them: 6 or 8 digits. */
export const BIN_PATTERN = /^(\d{6}|\d{8})$/;

/** Records a violation on `field` unless `value` is absent or a card BIN; returns the valid BIN. */
export function checkCardBin(
  value: string | undefined,
  field: string,
  violations: Violations,
): string | undefined {
  if (value === undefined) return undefined;
  if (BIN_PATTERN.test(value)) return value;
  violations.add(field, "must be the card's first 6 or 8 digits");
  return undefined;
}

/**
 * The form in which a hashed PAN is stored: HMAC-SHA256 under the server's pepper, lower-case hex.
 * A copy of the database alone cannot be brute-forced back to card numbers.
 */
export function panHashOf(pepper: string, hashedPan: string): string {
  return createHmac("sha256", pepperKeyOf(pepper)).update(hashedPan.toLowerCase(), "utf8").digest("hex");
}

/** The pepper whose key object {@link pepperKeyOf} holds, and that key. */
let pepperKey: { pepper: string; key: KeyObject } | undefined;

/**
 * The pepper as a secret key object, the same key bytes (its UTF-8) that `createHmac` takes from the
 * string, imported once per pepper rather than on every HMAC: with the string, each of an encrypt's
 * card HMACs imported the key again (about 0.4 of 4.6 us per HMAC on Node 24).
 */
function pepperKeyOf(pepper: string): KeyObject {
  // secret-compare: the configured pepper against the one remembered from it; no caller sends either.
  if (pepperKey?.pepper !== pepper) pepperKey = { pepper, key: createSecretKey(pepper, "utf8") };
  return pepperKey.key;
}

const PAR = /^[0-9A-Z]{29}$/;

/**
 * Whether `value` is an EMVCo Payment Account Reference: 29 upper-case letters and
 * digits. No other case is accepted: a PAR is an exact reference, and two spellings of one would be
 * two cards.
 */
export function isPar(value: string): boolean {
  return PAR.test(value);
}

/**
 * The form in which a PAR is stored and a card routed by it is keyed: HMAC-SHA256 under the pepper,
 * like {@link panHashOf}, over `par:` and the PAR, so that a PAR and a hashed PAN never key the same
 * card by accident (their inputs differ in form and length anyway). Lower-case hex, the form of a
 * `panHash`: a card registered by PAR is stored, listed, escrowed and erased by this key exactly as a
 * card registered by hashed PAN is by its own.
 */
export function parKeyOf(pepper: string, par: string): string {
  return createHmac("sha256", pepperKeyOf(pepper)).update(`par:${par}`, "utf8").digest("hex");
}

/**
 * A card as a request names it: a hashed PAN (64 hexadecimal characters, any case) or a PAR, exactly
 * one of the two. Absent is "" or `undefined` (proto3 strings and optional fields alike).
 */
export interface CardReference {
  hashedPan?: string | undefined;
  par?: string | undefined;
}

/** The names a request gives the two card fields, for its error messages. */
export interface CardFields {
  hashedPan: string;
  par: string;
}

/** The fields of a merchant request (a receipt, a look-up, a sealed receipt) that name its card. */
export const MERCHANT_CARD_FIELDS: CardFields = { hashedPan: "recipientHashedPan", par: "recipientPar" };

/** The fields of an issuer request (register, pending escrow) that name its card. */
export const ISSUER_CARD_FIELDS: CardFields = { hashedPan: "hashedPan", par: "par" };

/**
 * Records violations unless `card` names exactly one well-formed card reference: both given, or
 * neither, is `invalid_request` naming both fields. The value itself is never echoed.
 */
export function checkCardReference(card: CardReference, fields: CardFields, violations: Violations): void {
  const hashedPan = card.hashedPan ?? "";
  const par = card.par ?? "";
  if (hashedPan !== "" && par !== "") {
    violations.add(fields.par, `cannot stand beside ${fields.hashedPan}: name the card by exactly one`);
    return;
  }
  if (hashedPan === "" && par === "") {
    violations.add(fields.hashedPan, `is required (or ${fields.par}, the card's PAR)`);
    return;
  }
  if (par === "") checkHashedPan(hashedPan, fields.hashedPan, violations);
  else if (!isPar(par)) violations.add(fields.par, "must be a PAR: 29 upper-case letters and digits");
}

/** The keyed card reference (`panHash`) of a card that {@link checkCardReference} accepted. */
export function cardKeyOf(pepper: string, card: CardReference): string {
  const par = card.par ?? "";
  return par === "" ? panHashOf(pepper, card.hashedPan ?? "") : parKeyOf(pepper, par);
}

/**
 * Records violations unless `card` names at least one well-formed card reference: a registration may
 * name the card by its hashed PAN, its PAR, or both (one user holding both references). Neither is
 * `invalid_request` naming both fields; a value is never echoed.
 */
export function checkRegisteredCard(card: CardReference, fields: CardFields, violations: Violations): void {
  const hashedPan = card.hashedPan ?? "";
  const par = card.par ?? "";
  if (hashedPan === "" && par === "") {
    violations.add(fields.hashedPan, `is required (or ${fields.par}, the card's PAR, or both)`);
    return;
  }
  if (hashedPan !== "") checkHashedPan(hashedPan, fields.hashedPan, violations);
  if (par !== "" && !isPar(par))
    violations.add(fields.par, "must be a PAR: 29 upper-case letters and digits");
}

/**
 * The keyed references of a card that {@link checkRegisteredCard} accepted: its hashed PAN's (or its
 * PAR's, when that is all it names) as `panHash`, and its PAR's as `aliasPanHash` when it names both.
 */
export function cardKeysOf(pepper: string, card: CardReference): { panHash: string; aliasPanHash?: string } {
  const hashedPan = card.hashedPan ?? "";
  const par = card.par ?? "";
  if (hashedPan === "" || par === "") return { panHash: cardKeyOf(pepper, card) };
  return { panHash: panHashOf(pepper, hashedPan), aliasPanHash: parKeyOf(pepper, par) };
}
