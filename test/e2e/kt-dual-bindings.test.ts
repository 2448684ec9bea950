import { generateKeyPairSync, randomUUID } from "node:crypto";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OnboardingService } from "../../gen/receipts/v1/onboarding_pb.js";
import {
  createKeyTrust,
  createReceiptsClient,
  type IssuerSigner,
  type KeyTrust,
  KeyVerificationError,
  keyBindingStatement,
  parAnswerOf,
  registerDeviceKey,
  signCardBindings,
  signStatement,
} from "../../src/client/index.js";
import { panHashOf, parKeyOf } from "../../src/domain/pan.js";
import type { Store } from "../../src/store/types.js";
import { hashPan, post, type TestService } from "../support/harness.js";
import { PEPPER } from "../support/kt.js";
import { startWitnessedService, type WitnessedService } from "../support/kt-witnessed.js";

/**
 * A card registered by both its hashed PAN and its PAR has one binding per card reference (issue 32,
 * issue 33): `register` takes `binding` (the hashed PAN's) and `parBinding` (the PAR's), checks each
 * against its own reference and its own sequence, writes both pending leaves in the registration's
 * one store step, and answers both with their proofs (`parAnswer`). A merchant routing by either
 * reference verifies the lookup; the device verifies both halves of its registration. A refused
 * dual registration writes nothing, and with `requireBindings` a missing half is `forbidden`.
 */

const TOKEN = "kt-dual-bindings-admin-token-0123456789";
const BIN = "411111";
const DAY = 86_400_000;

let cards = 0;
/** A fresh card: its hashed PAN (upper case, as some issuers send it) and its PAR. */
function dualCard(): { hashedPan: string; par: string } {
  cards += 1;
  return {
    hashedPan: hashPan(`4111118${String(cards).padStart(9, "0")}`).toUpperCase(),
    par: `Q9${randomUUID().replaceAll("-", "").toUpperCase().slice(0, 27)}`,
  };
}

function deviceKey(): { keyId: string; publicKey: string } {
  const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return {
    keyId: randomUUID(),
    publicKey: publicKey.export({ type: "spki", format: "der" }).toString("base64"),
  };
}

describe("a card registered by both references: one binding per reference", { timeout: 120_000 }, () => {
  let kt: WitnessedService;
  let svc: TestService;
  let store: Store;
  let trust: KeyTrust;
  let root: IssuerSigner;
  let otherRoot: IssuerSigner;
  let otherKey: string;

  beforeAll(async () => {
    kt = await startWitnessedService({ token: TOKEN, name: "kt-dual-bindings" });
    ({ svc, store } = kt);
    trust = createKeyTrust({ policy: kt.policy, baseUrl: svc.baseUrl });
    await kt.ownBins("issuer-1", [BIN]);
    root = await kt.confirmedRoot("issuer-1", svc.issuerKey);
    otherKey = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "bank-other" });
    otherRoot = await kt.confirmedRoot("bank-other", otherKey);
  });
  afterAll(async () => {
    await kt?.close();
  });

  /** Both bindings of `card` for `device`, at the given versions, signed by `signer`. */
  function bindingsFor(
    card: { hashedPan: string; par: string },
    device: { keyId: string; publicKey: string },
    options: {
      versions?: { hashedPan: number; par: number };
      supersedes?: string;
      signer?: IssuerSigner;
    } = {},
  ) {
    return signCardBindings(
      {
        issuer: "issuer-1",
        card,
        bin: BIN,
        ...device,
        versions: options.versions ?? { hashedPan: 1, par: 1 },
        ...(options.supersedes === undefined
          ? {}
          : { supersedes: { hashedPan: options.supersedes, par: options.supersedes } }),
        notBefore: Date.now() - DAY,
      },
      options.signer ?? root,
    );
  }

  const keysOf = (card: { hashedPan: string; par: string }) => ({
    pan: panHashOf(PEPPER, card.hashedPan),
    par: parKeyOf(PEPPER, card.par),
  });

  /** Nothing of a refused registration is stored: no user, no sequence of either reference, nothing pending. */
  async function nothingWritten(card: { hashedPan: string; par: string }) {
    const keys = keysOf(card);
    for (const key of [keys.pan, keys.par]) {
      expect(await store.users.findByPanHash(key)).toBeUndefined();
      expect(await store.ktLog.sequenceState(`card:${key}`)).toBeUndefined();
    }
    const pending = await store.ktLog.pending(10_000);
    const mine = pending.filter(
      (p) => p.kind === "statement" && (p.card?.key === keys.pan || p.card?.key === keys.par),
    );
    expect(mine).toEqual([]);
  }

  it("REST: logs a 0x01 and a 0x02 leaf, answers both with proofs, and a lookup by either verifies", async () => {
    const card = dualCard();
    const device = deviceKey();
    const { binding, parBinding } = await bindingsFor(card, device);
    const res = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      ...card,
      ...device,
      cardBin: BIN,
      binding,
      parBinding,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const data = res.body.data;
    expect(data.binding).toEqual(binding);
    expect(data.parAnswer.binding).toEqual(parBinding);
    const keys = keysOf(card);
    const panLeaf = await store.ktLog.lastOfSequence(`card:${keys.pan}`);
    const parLeaf = await store.ktLog.lastOfSequence(`card:${keys.par}`);
    expect(panLeaf?.leaf?.[0]).toBe(0x01);
    expect(parLeaf?.leaf?.[0]).toBe(0x02);
    expect(data.proof.leafIndex).toBe(panLeaf?.index);
    expect(data.parAnswer.proof.leafIndex).toBe(parLeaf?.index);
    expect(JSON.stringify(res.body)).not.toContain(card.par);
    // The device's own check of each half, and the merchant's of a lookup by each reference.
    await trust.verify(data, { hashedPan: card.hashedPan, bin: BIN });
    await trust.verify(parAnswerOf(data), { par: card.par, bin: BIN });
    const byPar = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
      recipientPar: card.par,
      cardBin: BIN,
    });
    expect(byPar.status, JSON.stringify(byPar.body)).toBe(200);
    expect(byPar.body.data.binding).toEqual(parBinding);
    const parVerified = await trust.verify(byPar.body.data, { par: card.par, bin: BIN });
    expect(parVerified).toMatchObject({ keyId: device.keyId, issuer: "issuer-1", version: 1 });
    const byPan = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
      recipientHashedPan: card.hashedPan,
      cardBin: BIN,
    });
    expect(byPan.body.data.binding).toEqual(binding);
    await trust.verify(byPan.body.data, { hashedPan: card.hashedPan, bin: BIN });
    // The PAR's binding does not verify as the hashed PAN's, nor the other way round.
    await expect(
      trust.verify(byPar.body.data, { hashedPan: card.hashedPan, bin: BIN }),
    ).rejects.toBeInstanceOf(KeyVerificationError);
  });

  it("device and gRPC: registerDeviceKey checks both halves; a rotation takes version 2 of each", async () => {
    const card = dualCard();
    const device = deviceKey();
    const client = createReceiptsClient({
      baseUrl: svc.baseUrl,
      apiKey: svc.issuerKey,
      retry: { maxAttempts: 1 },
    });
    const first = await bindingsFor(card, device);
    const registered = await registerDeviceKey(
      client,
      { ...card, cardBin: BIN, ...device, ...first },
      {
        trust,
        card: { hashedPan: card.hashedPan, bin: BIN },
        parCard: { par: card.par, bin: BIN },
        firstRegistration: true,
      },
    );
    expect(registered.verified).toMatchObject({ keyId: device.keyId, version: 1 });
    expect(registered.parVerified).toMatchObject({ keyId: device.keyId, version: 1 });

    const rotated = deviceKey();
    const grpc = createClient(OnboardingService, createGrpcTransport({ baseUrl: svc.baseUrl }));
    const second = await bindingsFor(card, rotated, {
      versions: { hashedPan: 2, par: 2 },
      supersedes: device.keyId,
    });
    const answer = await grpc.register(
      { ...card, cardBin: BIN, ...rotated, ...second },
      { headers: { "x-api-key": svc.issuerKey } },
    );
    expect(answer.userId).toBe(registered.registration.userId);
    expect(answer.parAnswer?.binding).toMatchObject(second.parBinding);
    expect(answer.parAnswer?.proof?.leafIndex).toBe(
      BigInt((await store.ktLog.lastOfSequence(`card:${keysOf(card).par}`))?.index ?? -1),
    );
    const verified = await trust.verify(parAnswerOf(answer), { par: card.par, bin: BIN });
    expect(verified.version).toBe(2);
  });

  it("a signed rotation by one reference of a card held by both is refused, writing nothing; by both it rotates", async () => {
    const card = dualCard();
    const device = deviceKey();
    const registered = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      ...card,
      ...device,
      cardBin: BIN,
      ...(await bindingsFor(card, device)),
    });
    expect(registered.status, JSON.stringify(registered.body)).toBe(200);
    const keys = keysOf(card);
    const before = {
      pan: await store.ktLog.sequenceState(`card:${keys.pan}`),
      par: await store.ktLog.sequenceState(`card:${keys.par}`),
    };
    const rotated = deviceKey();
    const second = await bindingsFor(card, rotated, {
      versions: { hashedPan: 2, par: 2 },
      supersedes: device.keyId,
    });
    const oneRef = [
      { sent: { hashedPan: card.hashedPan, binding: second.binding }, missing: "par" },
      { sent: { par: card.par, binding: second.parBinding }, missing: "hashedPan" },
    ];
    for (const { sent, missing } of oneRef) {
      const res = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
        ...rotated,
        cardBin: BIN,
        ...sent,
      });
      expect(res.body.error?.code, JSON.stringify(res.body)).toBe("invalid_request");
      expect(res.body.error?.details).toMatch(new RegExp(`^${missing}: `));
      expect(res.body.error?.details).toContain("parBinding");
      expect(JSON.stringify(res.body)).not.toContain(card.par);
      expect(JSON.stringify(res.body).toLowerCase()).not.toContain(card.hashedPan.toLowerCase());
    }
    // Nothing changed: the user keeps its key, neither sequence moved, nothing is pending.
    expect((await store.users.findByPanHash(keys.pan))?.activeKeyId).toBe(device.keyId);
    expect(await store.users.findKey(rotated.keyId)).toBeUndefined();
    expect(await store.ktLog.sequenceState(`card:${keys.pan}`)).toEqual(before.pan);
    expect(await store.ktLog.sequenceState(`card:${keys.par}`)).toEqual(before.par);
    const pending = (await store.ktLog.pending(10_000)).filter(
      (p) => p.kind === "statement" && (p.card?.key === keys.pan || p.card?.key === keys.par),
    );
    expect(pending).toEqual([]);
    const lookupByPar = async () => {
      const res = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
        recipientPar: card.par,
        cardBin: BIN,
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return trust.verify(res.body.data, { par: card.par, bin: BIN });
    };
    expect(await lookupByPar()).toMatchObject({ keyId: device.keyId, version: 1 });
    // By both, with both bindings, the rotation goes through and either lookup verifies the new key.
    const both = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      ...card,
      ...rotated,
      cardBin: BIN,
      ...second,
    });
    expect(both.status, JSON.stringify(both.body)).toBe(200);
    expect(await lookupByPar()).toMatchObject({ keyId: rotated.keyId, version: 2 });
    const byPan = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
      recipientHashedPan: card.hashedPan,
      cardBin: BIN,
    });
    const panVerified = await trust.verify(byPan.body.data, { hashedPan: card.hashedPan, bin: BIN });
    expect(panVerified).toMatchObject({ keyId: rotated.keyId, version: 2 });
  });

  describe("refuses, writing nothing", () => {
    async function refused(
      make: (
        card: { hashedPan: string; par: string },
        device: { keyId: string; publicKey: string },
      ) => Promise<{
        binding?: unknown;
        parBinding?: unknown;
        par?: string | undefined;
      }>,
      code: string,
      field: string,
    ) {
      const card = dualCard();
      const device = deviceKey();
      const fields = await make(card, device);
      const res = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
        ...card,
        ...device,
        cardBin: BIN,
        ...fields,
      });
      expect(res.body.error?.code, JSON.stringify(res.body)).toBe(code);
      expect(res.body.error?.details, JSON.stringify(res.body)).toContain(field);
      expect(JSON.stringify(res.body)).not.toContain(card.par);
      expect(JSON.stringify(res.body).toLowerCase()).not.toContain(card.hashedPan.toLowerCase());
      await nothingWritten(card);
    }

    it("a PAR binding for the wrong reference (the hashed PAN), or a hashed-PAN binding for the PAR", async () => {
      await refused(
        async (card, device) => {
          const { binding } = await bindingsFor(card, device);
          return { binding, parBinding: binding };
        },
        "invalid_request",
        "parBinding.statement.cardRef",
      );
      await refused(
        async (card, device) => {
          const { parBinding } = await bindingsFor(card, device);
          return { binding: parBinding, parBinding };
        },
        "invalid_request",
        "binding.statement.cardRef",
      );
    });

    it("a PAR binding whose token BIN the caller does not own (no cardBin sent)", async () => {
      const card = dualCard();
      const device = deviceKey();
      const { binding } = await bindingsFor(card, device);
      const statement = keyBindingStatement({
        issuer: "issuer-1",
        card: { par: card.par },
        bin: "46666688",
        ...device,
        version: 1,
        notBefore: Date.now() - DAY,
      });
      const parBinding = await signStatement(statement, root);
      const res = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
        ...card,
        ...device,
        binding,
        parBinding,
      });
      expect(res.body.error?.code, JSON.stringify(res.body)).toBe("forbidden");
      expect(res.body.error?.details).toBe("parBinding.statement.bin: is not a BIN this issuer tenant owns");
      await nothingWritten(card);
    });

    it("a PAR binding signed by another tenant's root", async () => {
      await refused(
        async (card, device) => {
          const { binding } = await bindingsFor(card, device);
          const { parBinding } = await bindingsFor(card, device, { signer: otherRoot });
          return { binding, parBinding };
        },
        "invalid_signature",
        "parBinding",
      );
    });

    it("a PAR binding of another key", async () => {
      await refused(
        async (card, device) => {
          const { binding } = await bindingsFor(card, device);
          const { parBinding } = await bindingsFor(card, deviceKey());
          return { binding, parBinding };
        },
        "invalid_request",
        "parBinding.statement.keyId",
      );
    });

    it("versions out of order: the PAR's first binding at version 2", async () => {
      await refused(
        async (card, device) => bindingsFor(card, device, { versions: { hashedPan: 1, par: 2 } }),
        "invalid_request",
        "parBinding.statement.version",
      );
    });

    it("one binding missing, or a parBinding without both references", async () => {
      await refused(
        async (card, device) => ({ binding: (await bindingsFor(card, device)).binding }),
        "invalid_request",
        "parBinding",
      );
      await refused(
        async (card, device) => ({ parBinding: (await bindingsFor(card, device)).parBinding }),
        "invalid_request",
        "binding",
      );
      const card = dualCard();
      const device = deviceKey();
      const parOnly = await signStatement(
        keyBindingStatement({ issuer: "issuer-1", card: { par: card.par }, bin: BIN, ...device, version: 1 }),
        root,
      );
      const res = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
        par: card.par,
        ...device,
        parBinding: parOnly,
      });
      expect(res.body.error?.code).toBe("invalid_request");
      expect(res.body.error?.details).toMatch(/^parBinding: /);
      await nothingWritten(card);
    });
  });

  it("requireBindings: a dual registration with one binding missing is forbidden, naming it", async () => {
    const tenant = "bank-strict";
    const key = await svc.newKey({ role: "issuer", tier: "standard", tenantId: tenant });
    const strict = await kt.admin("PUT", `/admin/v1/issuers/${tenant}/require-bindings`, {
      requireBindings: true,
    });
    expect(strict.status, JSON.stringify(strict.body)).toBe(200);
    const strictRoot = await kt.confirmedRoot(tenant, key);
    for (const missing of ["parBinding", "binding"] as const) {
      const card = dualCard();
      const device = deviceKey();
      const both = await signCardBindings(
        { issuer: tenant, card, bin: "522222", ...device, versions: { hashedPan: 1, par: 1 } },
        strictRoot,
      );
      const { [missing]: _dropped, ...sent } = both;
      const res = await post(svc, "/api/v1/onboarding/register", key, { ...card, ...device, ...sent });
      expect(res.status, JSON.stringify(res.body)).toBe(403);
      expect(res.body.error?.code).toBe("forbidden");
      expect(res.body.error?.details).toMatch(new RegExp(`^${missing}: `));
      await nothingWritten(card);
    }
  });
});
