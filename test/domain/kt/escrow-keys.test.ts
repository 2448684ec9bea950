import { generateKeyPairSync } from "node:crypto";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KeysService } from "../../../gen/receipts/v1/keys_pb.js";
import {
  type EscrowKeyInput,
  escrowKeyStatement,
  generateIssuerSigner,
  type IssuerSigner,
  keyBindingStatement,
  signStatement,
  statementOf,
} from "../../../src/client/key-binding.js";
import { base64, fromBase64Strict, utf8 } from "../../../src/kt/bytes.js";
import { formatTime } from "../../../src/kt/statements.js";
import { hashPan, post, startService, type TestService } from "../../support/harness.js";
import { operatorCalls, rawBinding } from "../../support/kt-issuers.js";

/**
 * Issuer escrow keys signed by the issuer (`POST /api/v1/issuers/escrow-keys` with `binding`, a
 * `receipts.v1/escrow-key` statement), from the attacker's side over REST, Connect and gRPC: a key
 * whose statement is the issuer's own, about exactly this key, superseding the current one, in its
 * version order and window, is stored under the statement's keyId with its statement and opening,
 * and the sequencer appends its leaf; a look-up of a card escrowed for the issuer answers that
 * statement with its proofs. Every refusal answers its code and writes nothing: no key, no pending
 * statement, no sequence. With `requireBindings`, an unsigned escrow key is `forbidden`.
 */

const TOKEN = "kt-escrow-keys-test-admin-token-012345";
const PATH = "/api/v1/issuers/escrow-keys";
let svc: TestService;
let tenant = 0;
let idCounter = 0;

beforeAll(async () => {
  svc = await startService({ env: { ADMIN_TOKEN: TOKEN, KT_SEQUENCER_POLL_MS: "20" } });
});
afterAll(async () => {
  await svc?.close();
});

const admin = (method: string, path: string, body?: unknown) =>
  operatorCalls(svc.baseUrl, TOKEN)(method, path, body);

interface Bank {
  id: string;
  key: string;
}

async function issuer(): Promise<Bank> {
  tenant += 1;
  const id = `escrow-bank-${tenant}`;
  return { id, key: await svc.newKey({ role: "issuer", tier: "standard", tenantId: id }) };
}

/** A root for the tenant, confirmed by the operator unless `confirm` is false. */
async function rootOf(bank: Bank, confirm = true): Promise<IssuerSigner> {
  const signer = await generateIssuerSigner("Ed25519");
  const added = await post(svc, "/api/v1/issuers/signing-keys", bank.key, { publicKey: signer.spki });
  expect(added.status, JSON.stringify(added.body)).toBe(200);
  if (confirm) {
    const res = await admin(
      "POST",
      `/admin/v1/issuers/${bank.id}/signing-keys/${signer.signingKeyId}/confirm`,
    );
    expect(res.status).toBe(200);
  }
  return signer;
}

/** An escrow public key: P-256 (default) or RSA SPKI, base64. */
function escrowPublicKey(kind: "p256" | "rsa" = "p256"): string {
  const { publicKey } =
    kind === "p256"
      ? generateKeyPairSync("ec", { namedCurve: "P-256" })
      : generateKeyPairSync("rsa", { modulusLength: 2048 });
  return publicKey.export({ type: "spki", format: "der" }).toString("base64");
}

function newKeyId(): string {
  idCounter += 1;
  return `iek_test-${String(idCounter).padStart(6, "0")}`;
}

function statementFor(bank: Bank, publicKey: string, overrides: Partial<EscrowKeyInput> = {}) {
  return escrowKeyStatement({ issuer: bank.id, keyId: newKeyId(), publicKey, version: 1, ...overrides });
}

/** Nothing of a refused escrow key is stored: no key, no sequence, no pending statement of the tenant. */
async function nothingWritten(bank: Bank, keysBefore: number) {
  expect(await svc.store.issuerEscrowKeys.list(bank.id)).toHaveLength(keysBefore);
  const pending = await svc.store.ktLog.pending(10_000);
  expect(pending.filter((p) => p.kind === "statement" && p.tenantId === bank.id)).toEqual([]);
  if (keysBefore === 0) expect(await svc.store.ktLog.sequenceState(`escrow:${bank.id}`)).toBeUndefined();
}

async function leafOf(sequence: string, version: number) {
  for (let i = 0; i < 400; i++) {
    const leaf = await svc.store.ktLog.lastOfSequence(sequence);
    if (leaf !== undefined && JSON.parse(leaf.statement ?? "{}").version === version) return leaf;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`no leaf of version ${version} for ${sequence}`);
}

describe("signed issuer escrow keys over REST", () => {
  it("stores the key under the statement's keyId; the sequencer appends it; the next must supersede it", async () => {
    const bank = await issuer();
    const root = await rootOf(bank);
    const publicKey = escrowPublicKey();
    const statement = statementFor(bank, publicKey);
    const keyId = JSON.parse(new TextDecoder().decode(statement)).keyId as string;
    const binding = await signStatement(statement, root);
    const res = await post(svc, PATH, bank.key, { publicKey, binding });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.data).toMatchObject({ escrowKeyId: keyId, algorithm: "HPKE-P256-SHA256-A256GCM" });
    expect((await svc.store.issuerEscrowKeys.current(bank.id))?.escrowKeyId).toBe(keyId);
    const leaf = await leafOf(`escrow:${bank.id}`, 1);
    expect(leaf.type).toBe("receipts.v1/escrow-key");
    expect(leaf.statement).toBe(new TextDecoder().decode(statement));
    expect(leaf.signingKeyId).toBe(root.signingKeyId);
    expect(leaf.opening).toMatch(/^[A-Za-z0-9+/]{22}==$/);

    // An RSA key next: version 2, superseding the first; the same version again or no supersedes is refused.
    const rsa = escrowPublicKey("rsa");
    for (const [overrides, field] of [
      [{ version: 1, supersedes: keyId }, "binding.statement.version"],
      [{ version: 2 }, "binding.statement.supersedes"],
    ] as const) {
      const refused = await post(svc, PATH, bank.key, {
        publicKey: rsa,
        binding: await signStatement(statementFor(bank, rsa, overrides), root),
      });
      expect(refused.body.error?.code, JSON.stringify(refused.body)).toBe("invalid_request");
      expect(JSON.stringify(refused.body)).toContain(field);
      expect(await svc.store.issuerEscrowKeys.list(bank.id)).toHaveLength(1);
    }
    const second = statementFor(bank, rsa, { version: 2, supersedes: keyId });
    const ok = await post(svc, PATH, bank.key, {
      publicKey: rsa,
      binding: await signStatement(second, root),
    });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(ok.body.data).toMatchObject({ algorithm: "RSA-OAEP-256" });
    expect((await leafOf(`escrow:${bank.id}`, 2)).type).toBe("receipts.v1/escrow-key");
    const audit = await admin("GET", `/admin/v1/audit?tenant=${bank.id}`);
    expect(JSON.stringify(audit.body)).toContain("escrow_key.registered");
  });

  it("answers a look-up of a card escrowed for the issuer with its escrow-key statement and proofs", async () => {
    const bank = await issuer();
    const root = await rootOf(bank);
    const change = svc.app.domain.kt.pendingDirectoryChange("bins.set", bank.id);
    expect((await svc.store.bins.set(bank.id, ["52000011"], new Date(), [change])).kind).toBe("set");
    const publicKey = escrowPublicKey();
    const statement = statementFor(bank, publicKey);
    const binding = await signStatement(statement, root);
    const res = await post(svc, PATH, bank.key, { publicKey, binding });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const leaf = await leafOf(`escrow:${bank.id}`, 1);
    let answer: Record<string, never> = {};
    for (let i = 0; i < 400; i++) {
      const lookup = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
        recipientHashedPan: hashPan("5200001100000007"),
        cardBin: "52000011",
      });
      expect(lookup.status, JSON.stringify(lookup.body)).toBe(200);
      answer = lookup.body.data;
      if (answer.proof !== undefined) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(answer).toMatchObject({ isEscrowed: true, keyId: res.body.data.escrowKeyId, publicKey });
    expect(answer.binding).toEqual({ ...binding });
    expect(answer.opening).toBe(leaf.opening);
    expect(answer.proof).toMatchObject({ leafIndex: leaf.index });
  });

  describe("refuses, writing nothing", () => {
    let bank: Bank;
    let root: IssuerSigner;
    let other: Bank;
    let otherRoot: IssuerSigner;
    beforeAll(async () => {
      bank = await issuer();
      root = await rootOf(bank);
      other = await issuer();
      otherRoot = await rootOf(other);
    });

    async function attempt(
      make: (publicKey: string) => Promise<unknown>,
      code: string,
      field?: string,
      publicKey = escrowPublicKey(),
    ) {
      const res = await post(svc, PATH, bank.key, { publicKey, binding: await make(publicKey) });
      expect(res.body.error?.code, JSON.stringify(res.body)).toBe(code);
      if (field !== undefined) expect(JSON.stringify(res.body)).toContain(field);
      await nothingWritten(bank, 0);
    }

    it("a statement signed by another tenant's key, or another tenant's own statement", async () => {
      await attempt(
        (k) => signStatement(statementFor(bank, k), otherRoot),
        "invalid_signature",
        "binding.signingKeyId",
      );
      await attempt(
        (k) => signStatement(statementFor(other, k), otherRoot),
        "invalid_request",
        "binding.statement",
      );
    });

    it("a statement about another key, suite or id, or not an escrow key", async () => {
      // After a UTF-8 byte-order mark, signed with it: once made the key current with nothing logged.
      await attempt(
        (k) => rawBinding(root, new Uint8Array([0xef, 0xbb, 0xbf, ...statementFor(bank, k)])),
        "invalid_request",
        "binding.statement",
      );
      await attempt(
        () => signStatement(statementFor(bank, escrowPublicKey()), root),
        "invalid_request",
        "binding.statement.spkiSha256",
      );
      // An RSA key registered with the statement of a P-256 key: the suite differs first.
      await attempt(
        () => signStatement(statementFor(bank, escrowPublicKey()), root),
        "invalid_request",
        "binding.statement.algorithm",
        escrowPublicKey("rsa"),
      );
      await attempt(
        (k) => signStatement(statementFor(bank, k, { keyId: "esc_0123456789abcdef" }), root),
        "invalid_request",
        "binding.statement.keyId",
      );
      await attempt(
        (k) => signStatement(statementFor(bank, k, { supersedes: "iek_not-the-current" }), root),
        "invalid_request",
        "binding.statement.supersedes",
      );
      await attempt(
        (k) => signStatement(statementFor(bank, k, { version: 2 }), root),
        "invalid_request",
        "binding.statement.version",
      );
      const device = generateKeyPairSync("ec", { namedCurve: "P-256" })
        .publicKey.export({ type: "spki", format: "der" })
        .toString("base64");
      await attempt(
        () =>
          signStatement(
            keyBindingStatement({
              issuer: bank.id,
              card: { hashedPan: hashPan("4111111111111111") },
              bin: "411111",
              keyId: "7d4f3bb2-0d5b-4a53-9d38-5d7a2f7f1e11",
              publicKey: device,
              version: 1,
            }),
            root,
          ),
        "invalid_request",
        "binding.statement.type",
        device,
      );
    });

    it("a window that has passed or is still to come", async () => {
      const day = 86_400_000;
      await attempt(
        (k) => signStatement(statementFor(bank, k, { notBefore: Date.now() - 40 * day }), root),
        "invalid_request",
        "binding.statement.notAfter",
      );
      await attempt(
        (k) => signStatement(statementFor(bank, k, { notBefore: Date.now() + day }), root),
        "invalid_request",
        "binding.statement.notBefore",
      );
    });

    it("tampered statement bytes or signature, and a root the operator has not confirmed", async () => {
      await attempt(async (k) => {
        const signed = await signStatement(statementFor(bank, k, { keyId: "iek_tampered-1" }), root);
        return { ...signed, statement: base64(statementFor(bank, k, { keyId: "iek_tampered-2" })) };
      }, "invalid_signature");
      await attempt(async (k) => {
        const signed = await signStatement(statementFor(bank, k), root);
        const sig = fromBase64Strict(signed.signature) as Uint8Array;
        sig[3] = (sig[3] ?? 0) ^ 0x10;
        return { ...signed, signature: base64(sig) };
      }, "invalid_signature");
      await attempt(
        async () => ({ statement: base64(utf8("{}")), signature: "", signingKeyId: "" }),
        "invalid_request",
        "binding.signature",
      );
      const fresh = await issuer();
      const pending = await rootOf(fresh, false);
      const publicKey = escrowPublicKey();
      const res = await post(svc, PATH, fresh.key, {
        publicKey,
        binding: await signStatement(statementFor(fresh, publicKey), pending),
      });
      expect(res.body.error?.code).toBe("invalid_signature");
      await nothingWritten(fresh, 0);
    });

    it("an escrowKeyId another tenant's key holds", async () => {
      const publicKey = escrowPublicKey();
      const taken = statementFor(other, publicKey);
      const keyId = JSON.parse(new TextDecoder().decode(taken)).keyId as string;
      const first = await post(svc, PATH, other.key, {
        publicKey,
        binding: await signStatement(taken, otherRoot),
      });
      expect(first.status, JSON.stringify(first.body)).toBe(200);
      await attempt((k) => signStatement(statementFor(bank, k, { keyId }), root), "conflict");
    });
  });

  it("forbids an unsigned escrow key once the tenant requires bindings, writing nothing", async () => {
    const bank = await issuer();
    const set = await admin("PUT", `/admin/v1/issuers/${bank.id}/require-bindings`, {
      requireBindings: true,
    });
    expect(set.status).toBe(200);
    const res = await post(svc, PATH, bank.key, { publicKey: escrowPublicKey() });
    expect(res.status).toBe(403);
    expect(res.body.error?.code).toBe("forbidden");
    expect(JSON.stringify(res.body)).toContain("binding");
    await nothingWritten(bank, 0);
    // Signed, it is stored.
    const root = await rootOf(bank);
    const publicKey = escrowPublicKey();
    const binding = await signStatement(statementFor(bank, publicKey), root);
    const ok = await post(svc, PATH, bank.key, { publicKey, binding });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
  });
});

describe("signed issuer escrow keys over Connect and gRPC", () => {
  it("registers with a binding, refuses a forged one with InvalidArgument and an unsigned one with PermissionDenied", async () => {
    const bank = await issuer();
    const root = await rootOf(bank);
    const headers = { "x-api-key": bank.key };
    for (const [name, transport] of [
      ["connect", createConnectTransport({ baseUrl: svc.baseUrl, httpVersion: "1.1" })],
      ["grpc", createGrpcTransport({ baseUrl: svc.baseUrl })],
    ] as const) {
      const keys = createClient(KeysService, transport);
      const current = (await svc.store.issuerEscrowKeys.current(bank.id))?.escrowKeyId ?? null;
      const version = (await svc.store.issuerEscrowKeys.list(bank.id)).length + 1;
      const publicKey = escrowPublicKey();
      const statement = statementFor(bank, publicKey, { version, supersedes: current });
      const binding = await signStatement(statement, root);
      const forged = await keys
        .registerEscrowKey({ publicKey: escrowPublicKey(), binding }, { headers })
        .catch((e: unknown) => e);
      expect(forged, name).toBeInstanceOf(ConnectError);
      expect((forged as ConnectError).code, name).toBe(Code.InvalidArgument);
      expect(await svc.store.issuerEscrowKeys.list(bank.id), name).toHaveLength(version - 1);
      const ok = await keys.registerEscrowKey({ publicKey, binding }, { headers });
      expect(ok.escrowKeyId, name).toBe(JSON.parse(new TextDecoder().decode(statement)).keyId);
      expect((await leafOf(`escrow:${bank.id}`, version)).type).toBe("receipts.v1/escrow-key");
    }
    const set = await admin("PUT", `/admin/v1/issuers/${bank.id}/require-bindings`, {
      requireBindings: true,
      ...(await requireBindingsStatement(bank, root)),
    });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    for (const transport of [
      createConnectTransport({ baseUrl: svc.baseUrl, httpVersion: "1.1" }),
      createGrpcTransport({ baseUrl: svc.baseUrl }),
    ]) {
      const err = await createClient(KeysService, transport)
        .registerEscrowKey({ publicKey: escrowPublicKey() }, { headers })
        .catch((e: unknown) => e);
      expect((err as ConnectError).code).toBe(Code.PermissionDenied);
      expect(await svc.store.issuerEscrowKeys.list(bank.id)).toHaveLength(2);
    }
  });
});

/** The root-signed `receipts.v1/require-bindings` statement turning the setting on (version 1). */
async function requireBindingsStatement(bank: Bank, root: IssuerSigner) {
  const signed = await signStatement(
    statementOf({
      v: 1,
      type: "receipts.v1/require-bindings",
      issuer: bank.id,
      requireBindings: true,
      version: 1,
      issuedAt: formatTime(Date.now()),
    }),
    root,
  );
  return { statement: signed.statement, signature: signed.signature };
}
