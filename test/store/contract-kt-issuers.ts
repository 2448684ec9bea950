import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { KtIssuerRecord, KtSigningKeyRecord } from "../../src/store/kt-issuers.js";
import { sequenceName } from "../../src/store/kt-sequence.js";
import type { KtPendingStatement } from "../../src/store/kt-types.js";
import type { Store } from "../../src/store/types.js";
import { at, uid } from "./fixtures.js";

/**
 * The rules of `src/store/kt-issuers.ts`: an issuer's signing keys and settings, replaced whole by a
 * compare-and-set on `revision`, with the key log's intake in the same atomic step.
 */

function key(overrides: Partial<KtSigningKeyRecord> = {}): KtSigningKeyRecord {
  return {
    signingKeyId: `sk_${randomBytes(16).toString("hex")}`,
    algorithm: "Ed25519",
    spki: randomBytes(44).toString("base64"),
    role: "root",
    status: "pending",
    createdAt: at(0),
    ...overrides,
  };
}

function record(tenantId: string, revision: number, keys: KtSigningKeyRecord[]): KtIssuerRecord {
  return { tenantId, signingKeys: keys, requireBindings: false, revision, updatedAt: at(revision) };
}

/** A tenant statement of `version` (the bytes are stand-ins: the store checks only the order). */
function tenantStatement(tenantId: string, version: number): KtPendingStatement {
  return {
    kind: "statement",
    id: uid("ktp"),
    tenantId,
    order: { sequence: sequenceName.tenant(tenantId), type: "receipts.v1/signing-key", version },
    statement: `{"version":${version}}`,
    signature: randomBytes(64).toString("base64"),
    signingKeyId: `sk_${randomBytes(16).toString("hex")}`,
    opening: randomBytes(16).toString("base64"),
    createdAt: at(0),
  };
}

export function ktIssuersContract(store: () => Store): void {
  describe("ktIssuers", () => {
    it("stores a tenant's first record, then each next revision, and lists them by tenant", async () => {
      const root = key();
      const tenant = uid("tnt");
      expect(await store().ktIssuers.get(tenant)).toBeUndefined();
      expect(await store().ktIssuers.put(record(tenant, 1, [root]))).toEqual({ kind: "stored" });
      const signer = key({ role: "signer", status: "current" });
      const second = {
        ...record(tenant, 2, [{ ...root, status: "current" as const, confirmedAt: at(5) }, signer]),
      };
      expect(await store().ktIssuers.put(second)).toEqual({ kind: "stored" });
      expect(await store().ktIssuers.get(tenant)).toEqual(second);
      expect(await store().ktIssuers.tenantOfSigningKey(signer.signingKeyId)).toBe(tenant);
      expect(await store().ktIssuers.tenantOfSigningKey(key().signingKeyId)).toBeUndefined();
      const other = record(`a${tenant}`, 1, [key()]);
      await store().ktIssuers.put(other);
      expect((await store().ktIssuers.list()).map((r) => r.tenantId)).toEqual([other.tenantId, tenant]);
    });

    it("finds the records with a BIN move requested at or before a time, and no others", async () => {
      const [old, young, none] = [uid("tnt"), uid("tnt"), uid("tnt")];
      const move = (seconds: number) => ({
        prefix: "411111",
        kind: "bin" as const,
        from: "x",
        requestedAt: at(seconds),
      });
      await store().ktIssuers.put({ ...record(old, 1, [key()]), binMoves: [move(100), move(1)] });
      await store().ktIssuers.put({ ...record(young, 1, [key()]), binMoves: [move(50)] });
      await store().ktIssuers.put(record(none, 1, [key()]));
      const found = async (t: Date) =>
        (await store().ktIssuers.withBinMovesBefore(t))
          .map((r) => r.tenantId)
          .filter((id) => [old, young, none].includes(id));
      expect(await found(at(0))).toEqual([]);
      expect(await found(at(1))).toEqual([old]);
      expect(await found(at(50))).toEqual([old, young].sort());
      const [stored] = (await store().ktIssuers.withBinMovesBefore(at(1))).filter((r) => r.tenantId === old);
      expect(stored?.binMoves).toEqual([move(100), move(1)]);
    });

    it("refuses a stale revision and a second first record (two roots racing): moved, nothing written", async () => {
      const tenant = uid("tnt");
      const first = record(tenant, 1, [key()]);
      const rival = record(tenant, 1, [key()]);
      const outcomes = await Promise.all([store().ktIssuers.put(first), store().ktIssuers.put(rival)]);
      expect(outcomes.map((o) => o.kind).sort()).toEqual(["moved", "stored"]);
      const stored = await store().ktIssuers.get(tenant);
      expect([first, rival]).toContainEqual(stored);
      expect(await store().ktIssuers.put(record(tenant, 3, [key()]))).toEqual({ kind: "moved" });
      expect(await store().ktIssuers.get(tenant)).toEqual(stored);
    });

    it("writes the change's statement with it, and refuses both when the statement is out of order", async () => {
      const tenant = uid("tnt");
      const statement = tenantStatement(tenant, 1);
      expect(await store().ktIssuers.put(record(tenant, 1, [key()]), [statement])).toEqual({
        kind: "stored",
      });
      expect(await store().ktLog.findPending(statement.id)).toMatchObject({ id: statement.id });
      const replay = tenantStatement(tenant, 1);
      const refused = await store().ktIssuers.put(record(tenant, 2, [key()]), [replay]);
      expect(refused).toMatchObject({ kind: "log_refused", pendingId: replay.id });
      expect((await store().ktIssuers.get(tenant))?.revision).toBe(1);
      expect(await store().ktLog.findPending(replay.id)).toBeUndefined();
    });

    it("keeps a rotated-in root's introduction with it, in the rotation's step, on get and list", async () => {
      const tenant = uid("tnt");
      const old = key({ status: "current", confirmedAt: at(1) });
      expect(await store().ktIssuers.put(record(tenant, 1, [old]))).toEqual({ kind: "stored" });
      const rotation = tenantStatement(tenant, 1);
      const introduction = {
        statement: Buffer.from(rotation.statement).toString("base64"),
        signature: rotation.signature,
        signingKeyId: old.signingKeyId,
      };
      const rotated = record(tenant, 2, [
        { ...old, status: "revoked", revokedAt: at(2), revokedAtVersion: 1 },
        key({ status: "current", introduction }),
      ]);
      expect(await store().ktIssuers.put(rotated, [rotation])).toEqual({ kind: "stored" });
      expect(await store().ktIssuers.get(tenant)).toEqual(rotated);
      const listed = (await store().ktIssuers.list()).find((r) => r.tenantId === tenant);
      expect(listed?.signingKeys[1]?.introduction).toEqual(introduction);
      expect(listed?.signingKeys[0]?.introduction).toBeUndefined();
      // A change refused by the log keeps nothing of it.
      const refused = record(tenant, 3, [key({ status: "current", introduction })]);
      expect((await store().ktIssuers.put(refused, [tenantStatement(tenant, 1)])).kind).toBe("log_refused");
      expect(await store().ktIssuers.get(tenant)).toEqual(rotated);
    });
  });
}
