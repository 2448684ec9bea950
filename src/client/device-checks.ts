import { base64url, fromBase64Strict } from "../kt/bytes.js";
import { defaultSha256 } from "../kt/hash.js";
import { type KeyBinding, parseStatement } from "../kt/statements.js";
import type { KtBinding } from "../kt/wire.js";
import { type CardIdentity, type KeyTrust, lookupAnswerOf, type VerifiedKey } from "./key-trust.js";

/**
 * The cardholder's device's own checks of the key directory (docs/key-transparency.md): at registration, that
 * the service logged exactly the binding the issuer signed for this device's key, under a witnessed
 * checkpoint, and that a first registration is the card's first binding; later, that what the
 * service would answer a merchant (`POST /api/v1/kt/self-check`) is still this device's key.
 *
 * What a self-check can and cannot see: a service that recognises self-checks can answer them honestly
 * while lying to merchants. A targeted substitution is caught by the merchant's own verification
 * (without the issuer's signing key there is no valid binding) and, through the log, by the issuer's
 * monitor; the device's checks catch what is done in the open.
 */

/** Why a device check failed. */
export type DeviceCheckCode =
  /** The register answer's statement is not the one the issuer signed for this device. */
  | "statement_mismatch"
  /** The answer names another key than the device's (or an escrow key): the card's key was replaced. */
  | "key_mismatch"
  /** A first registration answered with a version above 1: the card was bound before, by someone else. */
  | "not_first_binding"
  /** A self-check answered an older statement than the device's: the service serves a stale binding. */
  | "rolled_back";

/**
 * A device check that failed. The app must not go on silently: tell the user and the issuer (it is
 * the signal of a substitution, or of a registration the user did not make).
 */
export class DeviceCheckError extends Error {
  constructor(
    readonly code: DeviceCheckCode,
    message: string,
  ) {
    super(message);
    this.name = "DeviceCheckError";
  }
}

/** What the device holds about its own registration. */
export interface HeldBinding {
  /** The binding the issuer signed for this device's key (as sent to register). */
  binding: KtBinding;
  /** The device's key id and public key (base64 SPKI DER). */
  keyId: string;
  publicKey: string;
}

/**
 * Checks the register answer (its JSON `data`, or the client's `RegisterResponse`): the statement is
 * byte for byte the one signed for this device, names this device's key, and verifies under `trust`
 * (signature by a current signing key of the BIN's owner, leaf under a witnessed checkpoint); and on
 * the device's first registration of the card (`firstRegistration`), its version is 1. Throws
 * {@link DeviceCheckError} or `KeyVerificationError`.
 */
export async function checkRegistration(
  answer: unknown,
  held: HeldBinding,
  context: { trust: KeyTrust; card: CardIdentity; firstRegistration: boolean; signal?: AbortSignal },
): Promise<VerifiedKey> {
  heldStatement(held);
  answerStatement(answer, held);
  const sent = lookupAnswerOf(answer).binding;
  if (sent?.statement !== held.binding.statement || sent.signingKeyId !== held.binding.signingKeyId) {
    throw new DeviceCheckError(
      "statement_mismatch",
      "the register answer's statement is not the one signed for this device",
    );
  }
  const verified = await context.trust.verify(
    answer,
    context.card,
    context.signal === undefined ? {} : { signal: context.signal },
  );
  if (context.firstRegistration && verified.version !== 1) {
    throw new DeviceCheckError(
      "not_first_binding",
      `this card's first registration on this device is its binding version ${verified.version}: the card was registered before, with another key`,
    );
  }
  return verified;
}

/** A device key's registration with the issuer's signed binding, as {@link registerDeviceKey} sends it. */
export interface DeviceRegistration {
  /** The card: its hashed PAN, its PAR, or both (then `binding` is the hashed PAN's and `parBinding` the PAR's). */
  hashedPan?: string;
  par?: string;
  cardBin?: string;
  /** The device's key id and public key (base64 SPKI DER). */
  keyId: string;
  publicKey: string;
  /** The binding the issuer signed for this key (`signStatement`); with both references, the hashed PAN's. */
  binding: KtBinding;
  /** With both `hashedPan` and `par`: the PAR's binding for the same key (`signCardBindings`). */
  parBinding?: KtBinding;
}

/** How the device checks its registration: `parCard` is the card as a merchant routing by its PAR knows it. */
export interface RegistrationCheckContext {
  trust: KeyTrust;
  card: CardIdentity;
  /** With a `parBinding`: the PAR and its BIN (a wallet token's first 8 digits), for the PAR's check. */
  parCard?: CardIdentity;
  firstRegistration: boolean;
  signal?: AbortSignal;
}

/**
 * Registers the device's key with its signed binding and checks the answer before anything goes on
 * ({@link checkRegistration}): the answer carries byte for byte the statement signed for this key,
 * its leaf is in the log under a checkpoint the trust policy accepts, and, when `firstRegistration`
 * (the device has never registered this card), the binding is the card's first (version 1). Resolves
 * with the answer and the verified key; throws {@link DeviceCheckError} or `KeyVerificationError` (the
 * registration may then be stored: tell the user and the issuer, do not go on silently), or the
 * client's `ReceiptsApiError` when the call itself fails. `client` is the `ReceiptsClient` (its
 * `register`; typed by shape so that this module stays free of the transport).
 */
export async function registerDeviceKey<Answer>(
  client: {
    register(request: DeviceRegistration, options: { signal?: AbortSignal }): Promise<Answer>;
  },
  registration: DeviceRegistration,
  context: RegistrationCheckContext,
): Promise<{ registration: Answer; verified: VerifiedKey; parVerified?: VerifiedKey }> {
  const { keyId, publicKey } = registration;
  const held: HeldBinding = { binding: registration.binding, keyId, publicKey };
  heldStatement(held);
  const parHeld =
    registration.parBinding === undefined
      ? undefined
      : { binding: registration.parBinding, keyId, publicKey };
  if (parHeld !== undefined) {
    heldStatement(parHeld);
    if (context.parCard === undefined) throw new TypeError("context.parCard is required with a parBinding");
  }
  const options = context.signal === undefined ? {} : { signal: context.signal };
  const answer = await client.register(registration, options);
  const verified = await checkRegistration(answer, held, { ...context, ...options });
  if (parHeld === undefined || context.parCard === undefined) return { registration: answer, verified };
  const parVerified = await checkRegistration(parAnswerOf(answer), parHeld, {
    ...context,
    ...options,
    card: context.parCard,
  });
  return { registration: answer, verified, parVerified };
}

/**
 * The PAR's part of a register answer (`parAnswer`, with the key it names) as a lookup by the PAR
 * answers it; `statement_mismatch` when the answer carries none.
 */
export function parAnswerOf(raw: unknown): Record<string, unknown> {
  const answer = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  const par = answer.parAnswer;
  if (typeof par !== "object" || par === null) {
    throw new DeviceCheckError(
      "statement_mismatch",
      "the register answer carries no binding of the card's PAR",
    );
  }
  const { binding, opening, proof, directory, rootRotation } = par as Record<string, unknown>;
  const { keyId, algorithm, publicKey } = answer;
  // The issuer's rootRotation too: without it a verifier that counts the previous root refuses the
  // PAR's half for the root delay after a rotation, while the hashed PAN's half passes.
  return { keyId, algorithm, publicKey, isEscrowed: false, binding, opening, proof, directory, rootRotation };
}

/**
 * Compares a self-check answer (what lookup would answer a merchant now) with what the device holds,
 * and verifies it under `trust`: the same key, under a binding of this card at least as new as the
 * device's (a refresh the issuer signed since is fine: hand the device the new `binding`). Throws
 * {@link DeviceCheckError} or `KeyVerificationError`.
 */
export async function checkSelf(
  answer: unknown,
  held: HeldBinding,
  context: { trust: KeyTrust; card: CardIdentity; signal?: AbortSignal },
): Promise<VerifiedKey> {
  const mine = heldStatement(held);
  const theirs = answerStatement(answer, held);
  if (theirs === undefined || theirs.cardRef !== mine.cardRef)
    throw new DeviceCheckError(
      "key_mismatch",
      "the service answers no binding of this card to this device's key",
    );
  if (theirs.version < mine.version) {
    throw new DeviceCheckError(
      "rolled_back",
      `the service answers version ${theirs.version} of the card's binding; this device holds version ${mine.version}`,
    );
  }
  return context.trust.verify(
    answer,
    context.card,
    context.signal === undefined ? {} : { signal: context.signal },
  );
}

/** The device's own binding, checked to be about its key. */
function heldStatement(held: HeldBinding): KeyBinding {
  const bytes = fromBase64Strict(held.binding.statement);
  const parsed = bytes === undefined ? undefined : parseStatement(bytes);
  if (parsed === undefined || !parsed.ok || parsed.value.type !== "receipts.v1/key-binding")
    throw new TypeError("held.binding.statement is not a key binding");
  const spki = fromBase64Strict(held.publicKey);
  if (
    spki === undefined ||
    base64url(defaultSha256(spki)) !== parsed.value.spkiSha256 ||
    parsed.value.keyId !== held.keyId
  )
    throw new TypeError("held.binding is not about held.publicKey");
  return parsed.value;
}

/**
 * The answer's binding when the answer names the device's key; `key_mismatch` otherwise. (Whether
 * the statement is signed and logged is the trust's check, after this one.)
 */
function answerStatement(raw: unknown, held: HeldBinding): KeyBinding | undefined {
  const answer = lookupAnswerOf(raw);
  if (answer.keyId !== held.keyId || answer.publicKey !== held.publicKey || answer.isEscrowed) {
    throw new DeviceCheckError(
      "key_mismatch",
      "the service answers another key than this device's for the card",
    );
  }
  const bytes = answer.binding === undefined ? undefined : fromBase64Strict(answer.binding.statement);
  const parsed = bytes === undefined ? undefined : parseStatement(bytes);
  return parsed?.ok === true && parsed.value.type === "receipts.v1/key-binding" ? parsed.value : undefined;
}
