import { AppError } from "../../errors.js";
import type { CardRefKind, KtPendingStatement } from "../../store/kt-types.js";
import type { DomainDeps } from "../deps.js";
import type { KtAnswerFields } from "./answers.js";
import { type CheckedBinding, checkKeyBinding, registeredAnswer } from "./bindings.js";
import { fieldError, type SignedInput } from "./signed.js";

/**
 * The bindings of one register request (docs/key-transparency.md, "Bindings of a card registered by
 * both references"). A statement binds one card reference, so a card registered by both its hashed
 * PAN and its PAR takes one binding per reference: `binding` for the hashed PAN and `parBinding` for
 * the PAR, each checked against its own reference and its own sequence (version the last + 1 of that
 * reference's statements), both for the request's key. Their pending records go to the registration's
 * one store step, which writes both leaves' records or nothing; the answer carries both, each with its
 * proofs.
 */

/** The binding fields of a register request, and the card references it names. */
export interface RegisterBindingInput {
  hashedPan: string;
  par?: string | undefined;
  binding?: SignedInput | undefined;
  parBinding?: SignedInput | undefined;
}

/** What the request said, checked: the key, the `cardBin`, the keyed references, the user. */
export interface RegisterBindingContext {
  tenantId: string;
  keyId: string;
  algorithm: string;
  spki: string;
  cardBin: string | undefined;
  refs: { panHash: string; aliasPanHash?: string };
  userId: string;
}

/** The checked bindings: `main` is `binding`'s (the hashed PAN's, or the only reference's), `par` is `parBinding`'s. */
export interface RegisterBindings {
  main?: CheckedBinding;
  par?: CheckedBinding;
}

/**
 * The fields a registration must carry: `forbidden` naming the missing one when the tenant requires
 * bindings; `invalid_request` for a `parBinding` without both references, or for a card named by both
 * with one of its two bindings (one binding per card reference, or none).
 */
async function checkPresence(
  deps: Pick<DomainDeps, "store">,
  tenantId: string,
  input: RegisterBindingInput,
  dual: boolean,
): Promise<void> {
  if (!dual && input.parBinding !== undefined) {
    throw fieldError(
      "parBinding",
      "is only for a card registered by both hashedPan and par: send the binding in binding",
    );
  }
  const wanted = dual ? ["binding", "parBinding"] : ["binding"];
  const missing = wanted.filter((f) => (f === "binding" ? input.binding : input.parBinding) === undefined);
  if (missing.length === 0) return;
  const required = (await deps.store.ktIssuers.get(tenantId))?.requireBindings === true;
  if (required) {
    throw new AppError(
      "forbidden",
      "This issuer requires a signed binding for every card reference registered.",
      {
        violations: missing.map((field) => ({
          field,
          description: "is required: the issuer set requireBindings",
        })),
      },
    );
  }
  if (dual && missing.length === 1) {
    throw fieldError(
      missing[0] ?? "binding",
      "is required with the other binding: a card registered by both hashedPan and par has one binding per card reference",
    );
  }
}

/**
 * `invalid_request` naming the missing reference when a registration names one reference of a card
 * whose user already holds both: a rotation by one reference would advance that reference's statements
 * only, leaving the other reference's lookup to answer a key its latest binding does not name (which a
 * merchant's trust refuses). Called for registrations that carry a binding or whose tenant requires
 * bindings; unsigned registrations keep registering by either reference. Names the field, never the
 * reference's value.
 */
export function refuseOneOfTwoReferences(
  input: RegisterBindingInput,
  user: { aliasPanHash?: string | undefined } | undefined,
): void {
  const hashedPan = input.hashedPan ?? "";
  const par = input.par ?? "";
  if (user?.aliasPanHash === undefined || (hashedPan !== "" && par !== "")) return;
  throw fieldError(
    hashedPan === "" ? "hashedPan" : "par",
    "this card is registered by both hashedPan and par; register by both, with binding and parBinding",
  );
}

/**
 * Checks a register request's bindings against it (`checkKeyBinding` for each, with its own card
 * reference and field name). Answers none when the request carries none and the tenant allows it.
 */
export async function checkRegisterBindings(
  deps: DomainDeps,
  input: RegisterBindingInput,
  context: RegisterBindingContext,
): Promise<RegisterBindings> {
  const hashedPan = input.hashedPan ?? "";
  const par = input.par ?? "";
  const dual = hashedPan !== "" && par !== "";
  await checkPresence(deps, context.tenantId, input, dual);
  const expect = (field: string, card: { kind: CardRefKind; ref: string; key: string }) => ({
    tenantId: context.tenantId,
    card,
    keyId: context.keyId,
    algorithm: context.algorithm,
    spki: context.spki,
    cardBin: context.cardBin,
    userId: context.userId,
    field,
  });
  const { panHash, aliasPanHash } = context.refs;
  const result: RegisterBindings = {};
  if (input.binding !== undefined) {
    const card =
      hashedPan === ""
        ? { kind: "par" as const, ref: par, key: panHash }
        : { kind: "hashed-pan" as const, ref: hashedPan.toLowerCase(), key: panHash };
    result.main = await checkKeyBinding(deps, input.binding, expect("binding", card));
  }
  if (input.parBinding !== undefined && aliasPanHash !== undefined) {
    const card = { kind: "par" as const, ref: par, key: aliasPanHash };
    result.par = await checkKeyBinding(deps, input.parBinding, expect("parBinding", card));
  }
  return result;
}

/** The pending records of the checked bindings, for the registration's store step. */
export function pendingOf(bindings: RegisterBindings): KtPendingStatement[] {
  return [bindings.main?.pending, bindings.par?.pending].filter((p) => p !== undefined);
}

/** The register answer's key-directory members: `main`'s at the top level, `par`'s in `parAnswer`. */
export async function registeredAnswers(
  deps: DomainDeps,
  bindings: RegisterBindings,
): Promise<KtAnswerFields & { parAnswer?: KtAnswerFields }> {
  const main = bindings.main === undefined ? {} : await registeredAnswer(deps, bindings.main);
  if (bindings.par === undefined) return main;
  return { ...main, parAnswer: await registeredAnswer(deps, bindings.par) };
}
