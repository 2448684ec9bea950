import { AppError, Violations } from "../errors.js";
import type { ApiKeyRecord } from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import { erasedEvent } from "./events.js";
import type { CallerInfo } from "./grants.js";

/**
 * Erases a user (section 19) for the issuer tenant that owns it: its receipts (every one sealed to
 * its keys: wrapped keys and ciphertexts go together, crypto-shredding), its grants, its keys and the
 * user. Payments keep their non-secret record without a receipt. In that order, so that a call that
 * fails half-way finds the user again on retry and finishes. A second call is `not_found`; later
 * receipts for the card route as for an unregistered card. The audit keeps the event, with the user's
 * random id and no personal data.
 */
export async function deleteUser(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { userId: string },
  caller: CallerInfo,
): Promise<{ deletedReceipts: number; deletedKeys: number }> {
  const v = new Violations();
  if (input.userId === "") v.add("userId", "is required");
  v.throwIfAny();
  const user = await deps.store.users.findById(input.userId);
  if (!user || user.tenantId !== principal.tenantId) throw new AppError("not_found", "User not found.");
  const deletedReceipts = await deps.store.receipts.deleteByUser(user.userId);
  await deps.store.grants.deleteByUser(user.userId);
  const erased = await deps.store.users.erase(user.userId, [erasedEvent(user, deps.clock.now())]);
  if (erased === undefined) throw new AppError("not_found", "User not found.");
  await deps.store.audit.append({
    at: deps.clock.now(),
    action: "user.erased",
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    userId: user.userId,
    subject: `${deletedReceipts} receipts, ${erased.deletedKeys} keys`,
  });
  return { deletedReceipts, deletedKeys: erased.deletedKeys };
}
