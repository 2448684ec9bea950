import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { apiKeyCopy } from "../../src/store/memory/api-keys.js";
import { auditCopy } from "../../src/store/memory/audit.js";
import { copy } from "../../src/store/memory/copy.js";
import { keyCopy, userCopy } from "../../src/store/memory/users.js";
import type { ApiKeyRecord, AuditEvent, KeyRecord, UserRecord } from "../../src/store/types.js";
import { objectsOf, shapeOf } from "./copy-shapes.js";

/**
 * The memory store copies the records of a call's hot reads and writes by hand (the API key of every
 * call, a card's user and key, an audit event) instead of with the generic deep copy: each must give
 * what the generic copy gives, member for member and in the same order, and share no object with the
 * original. The arbitraries name every member of each record (typed so that a member added to a
 * record fails to compile here until it is generated), each optional member present or absent, so a
 * member a hand copy would share or drop is found.
 */

const date = fc.date({ noInvalidDate: true });
const text = fc.string({ maxLength: 20 });

/** Every member of `T`, each with its arbitrary: a member added to `T` must be added here. */
type Members<T> = { [K in keyof T]-?: fc.Arbitrary<NonNullable<T[K]>> };

const apiKeyMembers: Members<ApiKeyRecord> = {
  id: text,
  keyHash: text,
  prefix: text,
  env: fc.constantFrom("live", "test", "dev"),
  tenantId: text,
  role: fc.constantFrom("issuer", "merchant"),
  tier: fc.constantFrom("sandbox", "standard", "enterprise"),
  merchantIds: fc.array(text, { maxLength: 4 }),
  name: text,
  createdAt: date,
  revokedAt: date,
};

const userMembers: Members<UserRecord> = {
  userId: text,
  tenantId: text,
  panHash: text,
  activeKeyId: text,
  keyVersion: fc.nat(),
  createdAt: date,
  updatedAt: date,
  supersededAt: date,
  formerPanHash: text,
  aliasPanHash: text,
  formerAliasPanHash: text,
};

const keyMembers: Members<KeyRecord> = {
  keyId: text,
  tenantId: text,
  userId: text,
  publicKey: text,
  algorithm: fc.constantFrom("RSA-OAEP-256", "HPKE-P256-SHA256-A256GCM"),
  status: fc.constantFrom("pending", "active", "rotated"),
  createdAt: date,
  registeredAt: date,
  rotatedAt: date,
};

const auditMembers: Members<AuditEvent> = {
  at: date,
  action: text,
  tenantId: text,
  requestId: text,
  sourceIp: text,
  userId: text,
  keyId: text,
  previousKeyId: text,
  subject: text,
  actorTenantId: text,
  byOperator: fc.boolean(),
};

/**
 * Records of these members: the required ones always, each optional one present, absent, or present
 * as `undefined` (a record built with `{ revokedAt: maybe }`), the members in any order.
 */
function records<T>(members: Members<T>, required: readonly (keyof T)[]): fc.Arbitrary<T> {
  const names = Object.keys(members) as (keyof T)[];
  const optional = names.filter((name) => !required.includes(name));
  return fc
    .tuple(
      fc.record(members as unknown as Record<string, fc.Arbitrary<unknown>>),
      fc.array(fc.constantFrom("present", "absent", "undefined"), {
        minLength: optional.length,
        maxLength: optional.length,
      }),
    )
    .chain(([record, presence]) => {
      const kept = names.filter(
        (name) => !optional.includes(name) || presence[optional.indexOf(name)] !== "absent",
      );
      return fc
        .shuffledSubarray(kept, { minLength: kept.length })
        .map((order) =>
          Object.fromEntries(
            order.map((name) => [
              name,
              presence[optional.indexOf(name)] === "undefined"
                ? undefined
                : record[name as keyof typeof record],
            ]),
          ),
        );
    }) as unknown as fc.Arbitrary<T>;
}

/** Holds `handCopy` to the generic copy for every record `arbitrary` gives. */
function holdsToGeneric<T>(arbitrary: fc.Arbitrary<T>, handCopy: (record: T) => T): void {
  fc.assert(
    fc.property(arbitrary, (record) => {
      const ours = handCopy(record);
      const generic = copy(record);
      expect(shapeOf(ours)).toEqual(shapeOf(generic));
      expect(shapeOf(ours)).toEqual(shapeOf(record));
      const original = objectsOf(record);
      for (const object of objectsOf(ours)) expect(original.has(object)).toBe(false);
    }),
    { numRuns: 400 },
  );
}

describe("memory store record copies", () => {
  it("copies an API key record as the generic copy does, sharing nothing", () => {
    holdsToGeneric(
      records(apiKeyMembers, [
        "id",
        "keyHash",
        "prefix",
        "env",
        "tenantId",
        "role",
        "tier",
        "merchantIds",
        "name",
        "createdAt",
      ]),
      apiKeyCopy,
    );
  });

  it("copies a user record as the generic copy does, sharing nothing", () => {
    holdsToGeneric(
      records(userMembers, ["userId", "tenantId", "panHash", "activeKeyId", "createdAt", "updatedAt"]),
      userCopy,
    );
  });

  it("copies a key record as the generic copy does, sharing nothing", () => {
    holdsToGeneric(
      records(keyMembers, ["keyId", "tenantId", "publicKey", "algorithm", "status", "createdAt"]),
      keyCopy,
    );
  });

  it("copies an audit event as the generic copy does, sharing nothing", () => {
    holdsToGeneric(records(auditMembers, ["at", "action", "tenantId", "requestId", "sourceIp"]), auditCopy);
  });
});
