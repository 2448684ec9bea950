import type { AdminOperation } from "./admin.js";

/**
 * The operator API's key-directory operations (docs/key-transparency.md) in the OpenAPI document:
 * confirming an issuer's root signing key and setting its `requireBindings` and
 * `plaintextIntake`. Kept beside `admin.ts`, whose `ADMIN_OPERATIONS` includes them.
 */

const ID = { type: "string", pattern: "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$" };
const TENANT_PARAMETER = {
  name: "tenant",
  in: "path",
  required: true,
  description: "The issuer tenant.",
  schema: ID,
  example: "acme-bank",
};

/** The public key of the root in the examples (Ed25519), and its id. */
export const EXAMPLE_ROOT = {
  publicKey: "MCowBQYDK2VwAyEABx+gQqUQzlh02R44EtzbnionlSyPBOSy0BmoZfdRuZ0=",
  signingKeyId: "sk_39d0a4ae49f37c4cb6f6f1a7112457f8",
};

export const ADMIN_KT_OPERATIONS: Readonly<Record<string, AdminOperation>> = {
  "POST /admin/v1/issuers/{tenant}/signing-keys/{signingKeyId}/confirm": {
    summary: "Confirms an issuer's root signing key.",
    description:
      "A tenant's first signing key is its root, pending until the operator confirms it after an " +
      "out-of-band check with the bank (the key's id, read to each other). From then on the root " +
      "signs the tenant's statements, and the key log's next directory snapshot lists it as current. " +
      "Confirming it again answers it unchanged; audited as `admin.kt.root_confirmed`. A recovery " +
      "root (registered after the tenant's root revoked itself) is confirmed the same way, after the " +
      "same check; while the tenant has a current root, confirming any other key is `conflict` (or " +
      "`not_found`): the operator cannot replace a live root.",
    parameters: [
      TENANT_PARAMETER,
      {
        name: "signingKeyId",
        in: "path",
        required: true,
        description: "The root's `signingKeyId`, as the issuer registered it.",
        schema: { type: "string", pattern: "^sk_[0-9a-f]{32}$" },
        example: EXAMPLE_ROOT.signingKeyId,
      },
    ],
    data: {
      type: "object",
      required: ["tenant", "signingKeyId", "algorithm", "role", "status"],
      properties: {
        tenant: ID,
        signingKeyId: { type: "string" },
        algorithm: { type: "string", enum: ["Ed25519", "ECDSA-P256-SHA256"] },
        role: { type: "string", enum: ["root"] },
        status: { type: "string", enum: ["current"] },
        confirmedAt: { type: "string", format: "date-time" },
      },
      additionalProperties: false,
    },
    example: {
      tenant: "acme-bank",
      signingKeyId: EXAMPLE_ROOT.signingKeyId,
      algorithm: "Ed25519",
      role: "root",
      status: "current",
      confirmedAt: "2026-11-25T11:02:00.000Z",
    },
    errors: ["invalid_request", "not_found", "conflict"],
  },
  "PUT /admin/v1/issuers/{tenant}/require-bindings": {
    summary: "Sets whether an issuer requires signed bindings.",
    description:
      "With `requireBindings` the tenant's registrations and escrow keys without a signed `binding` " +
      "are `forbidden`. Before the tenant has a confirmed root the operator's word sets it; after, " +
      "the body must carry the root's `receipts.v1/require-bindings` statement saying the same " +
      "(`statement`, `signature`: base64), else `invalid_signature`; while the tenant waits for a " +
      "recovery root (its root revoked itself), `forbidden`. Audited.",
    parameters: [TENANT_PARAMETER],
    body: {
      schema: {
        type: "object",
        required: ["requireBindings"],
        properties: {
          requireBindings: { type: "boolean" },
          statement: { type: "string", description: "Base64 of the root's statement." },
          signature: { type: "string", description: "Base64 of its 64-byte signature." },
        },
        additionalProperties: false,
      },
      example: { requireBindings: true },
    },
    data: {
      type: "object",
      required: ["tenant", "requireBindings"],
      properties: { tenant: ID, requireBindings: { type: "boolean" } },
      additionalProperties: false,
    },
    example: { tenant: "acme-bank", requireBindings: true },
    errors: ["invalid_request", "invalid_signature", "forbidden", "conflict"],
  },
  "PUT /admin/v1/issuers/{tenant}/plaintext-intake": {
    summary: "Sets whether an issuer takes receipts in the clear.",
    description:
      "With `plaintextIntake` `refuse`, encrypt, create and refund with receipt fields are `forbidden` " +
      "for the tenant's cards (those of its BINs, and those it registered, whatever BIN the merchant " +
      "names): merchants seal on their side and send `sealedReceipt`, which is still taken. The key " +
      "log's directory snapshot shows the setting. Before the tenant has a confirmed root the " +
      "operator's word sets it; after, the body must carry the root's `receipts.v1/plaintext-intake` " +
      "statement saying the same (`statement`, `signature`: base64), else `invalid_signature`; while " +
      "the tenant waits for a recovery root (its root revoked itself), `forbidden`. Audited.",
    parameters: [TENANT_PARAMETER],
    body: {
      schema: {
        type: "object",
        required: ["plaintextIntake"],
        properties: {
          plaintextIntake: { type: "string", enum: ["refuse", "accept"] },
          statement: { type: "string", description: "Base64 of the root's statement." },
          signature: { type: "string", description: "Base64 of its 64-byte signature." },
        },
        additionalProperties: false,
      },
      example: { plaintextIntake: "refuse" },
    },
    data: {
      type: "object",
      required: ["tenant", "plaintextIntake"],
      properties: { tenant: ID, plaintextIntake: { type: "string", enum: ["refuse", "accept"] } },
      additionalProperties: false,
    },
    example: { tenant: "acme-bank", plaintextIntake: "refuse" },
    errors: ["invalid_request", "invalid_signature", "forbidden", "conflict"],
  },
};
