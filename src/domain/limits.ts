/**
 * Every limit on receipt content, in one place. The validator (`receipt-rules.ts`), the mock-item
 * generator and the gateways read these; the README's field table should quote them.
 *
 * String lengths are counted in Unicode code points (what a person would call characters), not in
 * UTF-16 units or UTF-8 bytes, so a limit means the same for "Müller" as for "Muller". Every limit on
 * a string is far above what a real receipt needs and far below what would let one request bloat
 * the store: the whole receipt must also fit in the HTTP body limit (1 MiB by default).
 */

/**
 * Receipt, merchant, transaction and line-item ids. They appear in the envelope's additional
 * authenticated data and in URLs, so they are also restricted to {@link ID_PATTERN}. 128 fits a UUID
 * (36), prefixed gateway ids (about 30) and composite ids like `store-12:till-3:2026-000123` with room
 * to spare, and matches the cap on request ids.
 */
export const MAX_ID_LENGTH = 128;

/**
 * The characters allowed in ids: ASCII letters and digits, then also `.`, `_`, `:` and `-`. Nothing
 * that needs escaping in a URL path segment, no separator of the AAD (`\n`), and an id cannot be `.`
 * or `..` (which a URL would treat as a path step) because it must start with a letter or digit.
 */
export const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]*$/;

/** The receipt format version, e.g. `1.0`; also part of the AAD. */
export const MAX_VERSION_LENGTH = 16;

/** The version used when a request leaves `version` empty. */
export const DEFAULT_VERSION = "1.0";

/** Merchant names: trading names longer than this do not fit on any printed receipt either. */
export const MAX_MERCHANT_NAME_LENGTH = 200;

/** A street line, which may hold building, floor and suite. */
export const MAX_STREET_LENGTH = 200;

/** Cities, states / regions and countries (free text; the longest official place names are about 170). */
export const MAX_PLACE_LENGTH = 200;

/** Postal codes: the longest national formats are 10 characters; 20 allows separators and prefixes. */
export const MAX_POSTAL_CODE_LENGTH = 20;

/** Tax ids (VAT, EIN, GSTIN, ...): national formats stay under 20 characters; 50 allows prefixes. */
export const MAX_TAX_ID_LENGTH = 50;

/** E-mail addresses: 254 is the longest address SMTP can carry (RFC 5321 path limit minus `<>`). */
export const MAX_EMAIL_LENGTH = 254;

/** The local part of an e-mail address (before `@`), RFC 5321. */
export const MAX_EMAIL_LOCAL_PART_LENGTH = 64;

/** IANA time zone names; the longest in the database is 30 characters. */
export const MAX_TIMEZONE_LENGTH = 64;

/** Short labels: payment method (`card`, `contactless`), card brand (`visa`), tax and category names. */
export const MAX_LABEL_LENGTH = 100;

/** Line-item names: a product description as printed on the receipt. */
export const MAX_ITEM_NAME_LENGTH = 200;

/** Card nonces (gateway_b): Square-style nonces are under 100 characters. */
export const MAX_CARD_NONCE_LENGTH = 256;

/**
 * The card acceptor name (statement descriptor): the name part of ISO 8583 field 43 has 25
 * positions (the rest of the 40 are city and country), and the schemes print no more of it.
 */
export const MAX_CARD_ACCEPTOR_NAME_LENGTH = 25;

/** Tenders of a split payment: two or three are usual; 20 covers a pile of gift cards. */
export const MAX_TENDERS = 20;

/** Lines of a receipt's tax breakdown, one per rate: countries have at most a handful of VAT rates. */
export const MAX_TAX_BREAKDOWN_LINES = 20;

/** Line items per receipt. A supermarket receipt rarely has more than 100. */
export const MAX_ITEMS = 500;

/** Taxes per line item: one or two are usual; 20 covers stacked federal, state, city and special taxes. */
export const MAX_TAXES_PER_ITEM = 20;

/**
 * The largest money value, in the smallest currency unit. Money travels as JSON numbers, so it must
 * stay exact in JavaScript: 2^53 - 1 (about 90 trillion dollars in cents).
 */
export const MAX_MONEY = Number.MAX_SAFE_INTEGER;

/** The smallest line-item quantity: an item with quantity 0 is not on the receipt. */
export const MIN_QUANTITY = 1;

/** The largest line-item quantity; beyond a million units a quantity is a unit mistake, not a purchase. */
export const MAX_QUANTITY = 1_000_000;

/** Tax rates are fractions: 0.19 for 19%. Anything outside [0, 1] is a percentage sent by mistake. */
export const MIN_TAX_RATE = 0;
/** See {@link MIN_TAX_RATE}. */
export const MAX_TAX_RATE = 1;

/** The earliest accepted transaction date: card receipts older than this are not being issued today. */
export const MIN_TRANSACTION_DATE = new Date("2000-01-01T00:00:00Z");

/**
 * How far in the future (relative to the injected clock) a transaction date may be, in milliseconds:
 * 24 hours absorbs clock skew and time-zone mistakes of POS terminals, but not a wrong year.
 */
export const MAX_TRANSACTION_DATE_SKEW_MS = 24 * 60 * 60 * 1000;
