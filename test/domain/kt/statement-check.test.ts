import { describe, expect, it } from "vitest";
import {
  checkStatement,
  type KtSigningKeyInfo,
  type KtSigningKeys,
  orderOf,
} from "../../../src/domain/kt/statement-check.js";
import { utf8 } from "../../../src/kt/bytes.js";
import { canonicalJson } from "../../../src/kt/json.js";
import { nobleEngine } from "../../../src/kt/signatures.js";
import { formatTime } from "../../../src/kt/statements.js";
import { advanceSequence, planIntake, sequenceName } from "../../../src/store/kt-sequence.js";
import type { KtPendingStatement } from "../../../src/store/kt-types.js";
import { bindingOf, type Issuer, makeIssuer, makeUserKey, NOW } from "../../kt/world.js";

/** A signing-key view over a list, as the signing-key store will answer. */
function keysOf(...keys: KtSigningKeyInfo[]): KtSigningKeys {
  return { find: async (tenant, id) => keys.find((k) => k.tenantId === tenant && k.signingKeyId === id) };
}

function info(issuer: Issuer, changes: Partial<KtSigningKeyInfo> = {}): KtSigningKeyInfo {
  return {
    tenantId: issuer.tenant,
    signingKeyId: issuer.signingKeyId,
    spki: issuer.spki,
    role: "root",
    status: "current",
    ...changes,
  };
}

function signed(issuer: Issuer, text: string, tenantId = issuer.tenant) {
  const statement = utf8(text);
  return { tenantId, statement, signature: issuer.sign(statement), signingKeyId: issuer.signingKeyId };
}

function tenantStatement(issuer: Issuer, members: Record<string, unknown>): string {
  return canonicalJson({
    v: 1,
    issuer: issuer.tenant,
    version: 1,
    issuedAt: formatTime(NOW),
    ...members,
  } as never);
}

describe("checkStatement", () => {
  const bank = makeIssuer("bank-a");
  const user = makeUserKey();
  const binding = bindingOf(bank, user, "a".repeat(64));

  it("accepts a binding signed by a current key of the tenant, with both engines", async () => {
    for (const engine of [undefined, nobleEngine]) {
      const check = await checkStatement(signed(bank, binding), keysOf(info(bank)), { engine });
      expect(check).toMatchObject({ ok: true, statement: { type: "receipts.v1/key-binding", version: 1 } });
    }
  });

  it("names the rule that refused: bytes, issuer, signer, root chain, signature", async () => {
    const other = makeIssuer("bank-b");
    const cases: Array<[Promise<unknown>, string, RegExp]> = [
      [checkStatement(signed(bank, ` ${binding}`), keysOf(info(bank))), "statement", /canonical/],
      [checkStatement(signed(bank, binding, "bank-b"), keysOf(info(bank))), "issuer", /issuer/],
      [checkStatement(signed(bank, binding), keysOf()), "signer", /no signing key/],
      [
        checkStatement(signed(bank, binding), keysOf(info(bank, { status: "pending" }))),
        "signer",
        /not current/,
      ],
      [checkStatement(signed(bank, binding), keysOf(info(bank, { status: "revoked" }))), "signer", /revoked/],
      // The view answers with another tenant's key record under this id: never trusted.
      [checkStatement(signed(bank, binding), { find: async () => info(other) }), "signer", /no signing key/],
      [
        checkStatement(
          { ...signed(bank, binding), signature: other.sign(utf8(binding)) },
          keysOf(info(bank)),
        ),
        "signature",
        /does not verify/,
      ],
    ];
    for (const [pending, check, reason] of cases) {
      const result = (await pending) as { ok: boolean; check: string; reason: string };
      expect(result).toMatchObject({ ok: false, check });
      expect(result.reason).toMatch(reason);
    }
  });

  it("refuses a tenant statement from a signer, and from a root not confirmed, except the root's own introduction", async () => {
    const claim = tenantStatement(bank, { type: "receipts.v1/bin-claim", prefix: "411111", kind: "bin" });
    expect(await checkStatement(signed(bank, claim), keysOf(info(bank)))).toMatchObject({ ok: true });
    expect(await checkStatement(signed(bank, claim), keysOf(info(bank, { role: "signer" })))).toMatchObject({
      ok: false,
      check: "signer",
      reason: expect.stringMatching(/root/),
    });
    expect(
      await checkStatement(signed(bank, claim), keysOf(info(bank, { status: "pending" }))),
    ).toMatchObject({ ok: false, check: "signer", reason: expect.stringMatching(/not confirmed/) });
    const introduction = (signingKeyId: string) =>
      tenantStatement(bank, {
        type: "receipts.v1/signing-key",
        signingKeyId,
        algorithm: "Ed25519",
        spki: Buffer.from(bank.spki).toString("base64"),
        role: "root",
      });
    const pendingRoot = keysOf(info(bank, { status: "pending" }));
    expect(await checkStatement(signed(bank, introduction(bank.signingKeyId)), pendingRoot)).toMatchObject({
      ok: true,
    });
    // Introducing another key is not an introduction of itself.
    const other = makeIssuer("bank-a");
    expect(await checkStatement(signed(bank, introduction(other.signingKeyId)), pendingRoot)).toMatchObject({
      ok: false,
      check: "signer",
    });
  });
  it("takes a retired root's tenant statements up to the one that retired it, and nothing else of it", async () => {
    const at = (version: number) =>
      tenantStatement(bank, { type: "receipts.v1/bin-claim", prefix: "411111", kind: "bin", version });
    const retired = keysOf(info(bank, { status: "revoked", revokedAtVersion: 3 }));
    for (const version of [1, 3]) {
      expect(await checkStatement(signed(bank, at(version)), retired)).toMatchObject({ ok: true });
    }
    expect(await checkStatement(signed(bank, at(4)), retired)).toMatchObject({
      ok: false,
      check: "signer",
      reason: expect.stringMatching(/revoked/),
    });
    // A binding, a signer with the same mark, and a root revoked without one: refused.
    expect(await checkStatement(signed(bank, binding), retired)).toMatchObject({
      ok: false,
      check: "signer",
    });
    const markedSigner = keysOf(info(bank, { role: "signer", status: "revoked", revokedAtVersion: 3 }));
    expect(await checkStatement(signed(bank, at(1)), markedSigner)).toMatchObject({
      ok: false,
      check: "signer",
    });
    const unmarked = keysOf(info(bank, { status: "revoked" }));
    expect(await checkStatement(signed(bank, at(1)), unmarked)).toMatchObject({ ok: false, check: "signer" });
  });
});

describe("sequences", () => {
  const pending = (id: string, order: KtPendingStatement["order"]): KtPendingStatement => ({
    kind: "statement",
    id,
    tenantId: "bank-a",
    order,
    statement: "{}",
    signature: "",
    signingKeyId: "sk_",
    opening: "",
    createdAt: new Date(NOW),
  });
  const KEY_A = "11111111-1111-4111-a111-111111111111";
  const KEY_B = "22222222-2222-4222-a222-222222222222";
  const card = sequenceName.card("panhash-1");
  const bind = (version: number, keyId: string, supersedes: string | null) =>
    ({
      sequence: card,
      type: "receipts.v1/key-binding",
      version,
      keyId,
      algorithm: "HPKE-P256-SHA256-A256GCM",
      spkiSha256: keyId === KEY_A ? "A".repeat(43) : "B".repeat(43),
      supersedes,
    }) as const;

  it("advances a card by the card rules and an issuer sequence by version", () => {
    const first = advanceSequence(undefined, bind(1, KEY_A, null));
    expect(first).toMatchObject({ ok: true, value: { version: 1, active: { keyId: KEY_A } } });
    const state = first.ok ? first.value : undefined;
    expect(advanceSequence(state, bind(2, KEY_B, null))).toMatchObject({ ok: false });
    expect(advanceSequence(state, bind(3, KEY_B, KEY_A))).toMatchObject({ ok: false });
    expect(advanceSequence(state, bind(2, KEY_B, KEY_A))).toMatchObject({
      ok: true,
      value: { version: 2, active: { keyId: KEY_B }, retired: [KEY_A] },
    });
    const escrow = { sequence: sequenceName.escrow("bank-a"), type: "receipts.v1/escrow-key" } as const;
    expect(advanceSequence(undefined, { ...escrow, version: 1 })).toMatchObject({
      ok: true,
      value: { version: 1 },
    });
    expect(advanceSequence(undefined, { ...escrow, version: 2 })).toMatchObject({ ok: false });
  });

  it("plans a change's statements in order and names the one refused", () => {
    const states = new Map([[card, { version: 1, active: null, retired: [KEY_A] }]]);
    const ok = planIntake([pending("p1", bind(2, KEY_B, null)), pending("p2", bind(3, KEY_B, null))], (s) =>
      states.get(s),
    );
    expect(ok).toMatchObject({ ok: true });
    expect(ok.ok && ok.states.get(card)).toMatchObject({ version: 3, active: { keyId: KEY_B } });
    const refused = planIntake([pending("p1", bind(2, KEY_A, null))], (s) => states.get(s));
    expect(refused).toEqual({
      ok: false,
      pendingId: "p1",
      reason: "a rotated or revoked key is never active again",
    });
  });

  it("names each statement's sequence: the keyed card, or the issuer's escrow or tenant sequence", () => {
    const bank = makeIssuer("bank-a");
    const user = makeUserKey();
    const parsed = JSON.parse(bindingOf(bank, user, "a".repeat(64)));
    expect(orderOf(parsed, { key: "k1" })).toMatchObject({
      sequence: "card:k1",
      version: 1,
      keyId: user.keyId,
    });
    expect(() => orderOf(parsed)).toThrow(/needs its card/);
    expect(
      orderOf(
        JSON.parse(tenantStatement(bank, { type: "receipts.v1/require-bindings", requireBindings: true })),
      ),
    ).toEqual({ sequence: "tenant:bank-a", type: "receipts.v1/require-bindings", version: 1 });
  });
});
