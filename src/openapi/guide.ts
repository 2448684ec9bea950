/**
 * The prose of the API reference: the OpenAPI document's `info.description` (CommonMark, as OpenAPI
 * asks), which the reference page at `/docs` renders above the operations and any other OpenAPI tool
 * shows as the document's introduction. What a developer needs before the first call and does not
 * find on a single operation: the conventions, authentication and roles, errors and retries, and the
 * zero-knowledge path across several operations.
 */

const OVERVIEW = `Receipt encryption and key management for card payments. A merchant's receipt is sealed to the
cardholder's own key and only the cardholder's device opens it. Every \`/api/v1\` path below is the REST
form of an RPC of the \`receipts.v1\` services, which the same port also serves over gRPC, gRPC-Web and
Connect: each operation names its RPC, and its example's JSON is the RPC's message.`;

const CONVENTIONS = `## Conventions

- Success is HTTP 200 with \`{"success": true, "data": ...}\`; an error is \`{"success": false, "error": {...}}\`.
- Field names are lowerCamelCase; money is a JSON integer in the smallest currency unit (950 is 9.50 EUR);
  times are RFC 3339 strings; bytes are base64. Unknown fields are refused, so a typo never drops data.
- Fields marked **required** must be sent with a value (in a schema: \`x-required: true\`). Every other
  field may be left out.
- Every response carries \`X-Request-Id\` (send your own to follow a call through the logs), and under
  \`/api/v1\` the \`X-RateLimit-Limit\`, \`X-RateLimit-Remaining\` and \`X-RateLimit-Reset\` headers.`;

const AUTHENTICATION = `## Authentication and roles

Every \`/api/v1\` call needs an API key in the \`X-API-Key\` header (gRPC and Connect: metadata
\`x-api-key\`). A key looks like \`rk_<env>_<random>\` and works only on a server of its environment
(\`live\`, \`test\` or \`dev\`). Each key has one role, and each operation says which roles may call it:

| role | who | calls |
|---|---|---|
| \`issuer\` | a card issuer's backend, for its cardholders' app | key registration, access grants, listing and decrypting receipts, escrow |
| \`merchant\` | a merchant's point of sale or its backend | encrypting receipts, payments, key look-up, merchant-sealed receipts, signing keys |

A missing, unknown or revoked key is \`unauthorized\` (401); a key of the wrong role, or a merchantId
the key may not use, is \`forbidden\` (403). A development server (\`npm start\` with the embedded store)
prints one key of each role. Health, readiness, metrics, the OpenAPI document and these pages need no key.

Calls are counted per key and minute by the key's tier (sandbox 60, standard 1,200, enterprise 12,000;
key generation separately: 10, 60, 600). Over the limit the answer is \`rate_limit_exceeded\` (429)
with \`Retry-After\` in seconds.

**Operator API.** When the server has \`ADMIN_TOKEN\` set, \`/admin/v1\` manages API keys, issuers' BIN
prefixes, merchantId ownership, and reads the audit log and escrow counts, with
\`Authorization: Bearer <ADMIN_TOKEN>\` instead of an API key. This reference then lists it under
*Operator*; without \`ADMIN_TOKEN\` every \`/admin/v1\` path is 404 and the section is absent.`;

const ERRORS = `## Errors and retries

An error names its \`code\`, a \`message\` for people, every offending field in \`details\`, the
\`request_id\` to quote, and \`doc_url\`: a link to the code's entry on [the error page](/docs/errors),
which says what each code means and whether a retry can help. Each operation lists the codes it can
answer. A declined card is \`payment_declined\` with a \`decline_code\`; a payment sent twice without an
Idempotency-Key is \`conflict\` with the \`payment_id\` of the first.

Retry 429, 500, 502, 503 and 504 (and timeouts) with a growing delay, after \`Retry-After\` when given;
never retry 4xx other than 429 unchanged. The creates (payments, encrypted and merchant-sealed receipts)
take an \`Idempotency-Key\` header: a retry with the same key and body gets the first answer, marked
\`Idempotent-Replayed: true\`, and nothing is created twice. The TypeScript client library does all of
this by itself.`;

const ZERO_KNOWLEDGE = `## The zero-knowledge path: receipts the service never reads

The simplest path, \`POST /api/v1/receipts/encrypt\` or a payment with the receipt's fields, hands the
receipt to the service in the clear: the service seals it at once and stores only ciphertext, but it
has seen the receipt for the length of the call. The decrypt operations are the same on the way out:
the caller sends the cardholder's private key for that call. Where that is not acceptable, the receipt
can go from merchant to cardholder without the service ever reading it:

1. **A key that stays on the device.** The cardholder's app makes its key pair itself, a P-256 key in
   the phone's secure hardware (iOS Secure Enclave, Android StrongBox) for
   \`HPKE-P256-SHA256-A256GCM\`, or an RSA key for \`RSA-OAEP-256\`, and the issuer's backend registers
   only the public key (\`Register\`). The private key never leaves the device.
2. **The merchant seals.** The merchant asks which key a receipt for the card goes to (\`LookupKey\`,
   with the SHA-256 of the card number, and the card's BIN when known), seals the receipt on its own
   side (AES-256-GCM, the AES key wrapped to that key; the additional authenticated data binds
   version, receiptId, merchantId and transactionId), signs it with its registered Ed25519 key when it
   has one, and sends only the sealed envelope: \`StoreSealedReceipt\`, or a payment whose receipt is a
   \`sealedReceipt\`.
3. **The device opens.** The app lists the cardholder's sealed receipts through the issuer's backend
   (\`ListReceipts\`), opens them with the private key on the device, and checks the merchant's
   signature against the merchant's signing key.

A card nobody registered yet gets its receipts in escrow: sealed to the escrow key of the issuer that
owns the card's BIN (which the service cannot open; the issuer re-wraps them with \`ListPendingEscrow\`
and \`ReleaseEscrow\`), or else to the service's own escrow key: until the card is registered and the
service re-wraps them to the cardholder's key, the service could open those. The TypeScript client library does the merchant's side
in one call (\`sealAndStoreReceipt\`) and the device's with WebCrypto (\`openReceipt\`, \`openListing\`).`;

/** The document's introduction, in CommonMark. */
export function guide(): string {
  return [OVERVIEW, CONVENTIONS, AUTHENTICATION, ERRORS, ZERO_KNOWLEDGE].join("\n\n");
}
