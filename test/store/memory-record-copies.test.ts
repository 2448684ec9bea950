import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { STATEMENT_TYPES, type StatementType } from "../../src/kt/statements.js";
import type {
  KtCheckpointRecord,
  KtCosignature,
  KtDirectoryRecord,
  KtLeafRecord,
} from "../../src/store/kt-types.js";
import { apiKeyCopy } from "../../src/store/memory/api-keys.js";
import { auditCopy } from "../../src/store/memory/audit.js";
import { copy } from "../../src/store/memory/copy.js";
import { checkpointCopy, directoryCopy, leafCopy } from "../../src/store/memory/kt-log.js";
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

const cosignatureMembers: Members<KtCosignature> = { line: text, timestamp: fc.nat() };

/** Bytes as a plain `Uint8Array` or as a `Buffer` that views a larger pool (what a store may hold). */
const bytes = fc.oneof(
  fc.uint8Array({ maxLength: 40 }),
  fc.uint8Array({ maxLength: 40 }).map((b) => Buffer.concat([Buffer.alloc(3), b]).subarray(3)),
);

const checkpointMembers: Members<KtCheckpointRecord> = {
  size: fc.nat(),
  root: bytes,
  note: text,
  signedAt: date,
  cosignatures: fc.dictionary(text, fc.record(cosignatureMembers), { maxKeys: 4 }),
};

const leafMembers: Members<KtLeafRecord> = {
  index: fc.nat(),
  kind: fc.constantFrom("statement", "directory", "transfer"),
  leaf: bytes,
  directorySha256: text,
  appendedAt: date,
  pendingId: text,
  tenantId: text,
  type: fc.constantFrom(...(Object.keys(STATEMENT_TYPES) as StatementType[])),
  sequence: text,
  version: fc.nat(),
  statement: text,
  signature: text,
  signingKeyId: text,
  opening: text,
  cardKind: fc.constantFrom("hashed-pan", "par"),
  cardKey: text,
  userId: text,
  erasedAt: date,
  erasedStatementSha256: text,
};

const directoryMembers: Members<KtDirectoryRecord> = {
  sha256: text,
  index: fc.nat(),
  json: text,
  issuedAt: date,
  notAfter: date,
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

  it("copies a key log checkpoint as the generic copy does, sharing nothing", () => {
    holdsToGeneric(records(checkpointMembers, Object.keys(checkpointMembers) as never), checkpointCopy);
    fc.assert(
      fc.property(records(checkpointMembers, Object.keys(checkpointMembers) as never), (record) => {
        // Its root as the generic copy gives bytes: a plain Uint8Array holding only them.
        const root = checkpointCopy(record).root;
        expect(Object.getPrototypeOf(root)).toBe(Uint8Array.prototype);
        expect([root.byteOffset, root.buffer.byteLength]).toEqual([0, record.root.length]);
      }),
    );
  });

  it("copies a key log directory snapshot as the generic copy does, sharing nothing", () => {
    holdsToGeneric(records(directoryMembers, Object.keys(directoryMembers) as never), directoryCopy);
  });

  it("copies a key log leaf as the generic copy does, sharing nothing", () => {
    holdsToGeneric(records(leafMembers, ["index", "kind", "appendedAt"]), leafCopy);
    fc.assert(
      fc.property(records(leafMembers, ["index", "kind", "appendedAt"]), (record) => {
        const leaf = leafCopy(record).leaf;
        if (record.leaf === undefined) expect(leaf).toBeUndefined();
        else {
          expect(Object.getPrototypeOf(leaf)).toBe(Uint8Array.prototype);
          expect([leaf?.byteOffset, leaf?.buffer.byteLength]).toEqual([0, record.leaf.length]);
        }
      }),
    );
  });
});
