import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  type CardIdentity,
  createKeyTrust,
  type KeyTrust,
  KeyVerificationError,
  type NewestBinding,
} from "../../src/client/key-trust.js";
import { openReceipt, type ReceiptJson, sealReceipt } from "../../src/client/webcrypto.js";
import { fromBase64Strict } from "../../src/kt/bytes.js";
import { formatTime } from "../../src/kt/statements.js";
import { answerFor, bindingOf } from "../kt/world.js";
import {
  CARD_BIN,
  Directory,
  FixtureServer,
  HASHED_PAN,
  LIES,
  type Lie,
  makeDeviceKey,
  NOW,
  type Scenario,
  snapshotSha256,
} from "./kt-fixture.js";

/**
 * The merchant's verification in the client library (docs/key-transparency.md, "The merchant's
 * verification"): an honest answer from the fixture's log seals and opens; each lie of issue 32's list is
 * refused with the check meant to catch it, before anything is sealed; the snapshot is fetched by its hash,
 * checked, and cached.
 */

const CARD: CardIdentity = { hashedPan: HASHED_PAN, bin: CARD_BIN };
const RECEIPT: ReceiptJson = {
  receiptId: "r-kt-1",
  merchantId: "m-kt",
  merchantName: "Checked Coffee",
  transactionId: "t-kt-1",
  transactionDate: "2026-11-25T11:00:00Z",
  currency: "EUR",
  items: [{ lineItemId: "1", name: "Espresso", quantity: 1, unitPrice: 250, totalPrice: 250 }],
};

/** What each lie is refused by: the check verifyLookup names. */
const EXPECTED: Record<Lie, string> = {
  "unsigned attacker key": "statement",
  "attacker key signed by its own key": "signature",
  "signed by an issuer that does not own the BIN": "issuer",
  "valid statement, proof of another leaf": "inclusion",
  "service escrow key for a BIN-owned card": "escrow",
  "expired statement": "window",
  "forked checkpoint, the log's signature alone": "checkpoint",
  "forked checkpoint, cosignatures copied from the real one": "checkpoint",
};

describe("KeyTrust and sealReceipt with a lookup answer", () => {
  const server = new FixtureServer();
  let directory: Directory;
  let trust: KeyTrust;
  beforeAll(() => server.start());
  afterAll(() => server.close());
  beforeEach(() => {
    directory = new Directory();
    server.requests.length = 0;
    server.directoryBody = undefined;
    trust = createKeyTrust({ policy: directory.world.policyJson, baseUrl: server.url, now: () => NOW });
  });

  const serve = (scenario: Scenario) => {
    server.use(scenario);
    return scenario.answer;
  };

  it("verifies an honest answer, seals to its key, and the device opens it", async () => {
    const answer = serve(directory.honest());
    const verified = await trust.verify(answer, CARD);
    expect(verified).toMatchObject({
      keyId: directory.device.keyId,
      issuer: "bank-a",
      version: 1,
      isEscrowed: false,
      aadBound: true,
    });
    const envelope = await sealReceipt(RECEIPT, answer, { trust, card: CARD });
    expect(envelope.keyBundle.keyId).toBe(directory.device.keyId);
    const opened = await openReceipt(envelope, directory.device.privateKey);
    expect(opened.merchantName).toBe("Checked Coffee");
  });

  it("fetches a snapshot once by its hash and answers later seals from the cache", async () => {
    const answer = serve(directory.honest());
    await trust.verify(answer, CARD);
    await Promise.all([trust.verify(answer, CARD), trust.verify(answer, CARD)]);
    const reads = server.requests.map((r) => `${r.method} ${r.path}`);
    expect(reads).toEqual([`GET /kt/v1/directory/${answer.directory.sha256}`]);
  });

  for (const lie of LIES) {
    it(`refuses ${lie}, sealing nothing`, async () => {
      const scenario = directory.lie(lie);
      const answer = serve(scenario);
      const refused = await trust.verify(answer, CARD).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(KeyVerificationError);
      expect((refused as KeyVerificationError).check).toBe(EXPECTED[lie]);
      await expect(sealReceipt(RECEIPT, answer, { trust, card: CARD })).rejects.toThrow(KeyVerificationError);
      // The only requests were snapshot reads; the attacker's key was never sealed to.
      expect(server.sent()).toEqual([]);
    });
  }

  it("refuses the service escrow key unless the policy allows it for a card whose owner has no escrow key", async () => {
    const answer = serve(directory.lie("service escrow key for a BIN-owned card"));
    const allowing = createKeyTrust({
      policy: { ...directory.world.policyJson, allowServiceEscrow: true },
      baseUrl: server.url,
      now: () => NOW,
    });
    await expect(allowing.verify(answer, CARD)).rejects.toMatchObject({ check: "escrow" });
    const unowned = await allowing.verify(answer, { hashedPan: HASHED_PAN, bin: "99999999" });
    expect(unowned).toMatchObject({ isEscrowed: true, issuer: null, aadBound: true });
  });

  it("refuses when the card's own BIN is missing or malformed, before reading anything", async () => {
    const answer = serve(directory.honest());
    for (const card of [
      { hashedPan: HASHED_PAN },
      { hashedPan: HASHED_PAN, bin: "4111" },
      { hashedPan: HASHED_PAN, bin: CARD_BIN, tokenBin: "12345678" },
      { bin: CARD_BIN },
      { par: "not-a-par", bin: CARD_BIN },
    ]) {
      await expect(trust.verify(answer, card as CardIdentity)).rejects.toMatchObject({ check: "card" });
    }
    expect(server.requests).toEqual([]);
  });

  it("refuses the key when the card is another one, or the BIN another issuer's", async () => {
    const answer = serve(directory.honest());
    await expect(trust.verify(answer, { hashedPan: "cd".repeat(32), bin: CARD_BIN })).rejects.toMatchObject({
      check: "card",
    });
    await expect(trust.verify(answer, { hashedPan: HASHED_PAN, bin: "52222222" })).rejects.toMatchObject({
      check: "issuer",
    });
    // The hashed PAN may come in either case, as lookup accepts it.
    expect((await trust.verify(answer, { hashedPan: HASHED_PAN.toUpperCase(), bin: CARD_BIN })).issuer).toBe(
      "bank-a",
    );
  });

  it("refuses a snapshot that is not the one named, a missing one, an oversized one, and never builds a path from a bad hash", async () => {
    const answer = serve(directory.honest());
    server.directoryBody = directory.snapshot.replace("bank-b", "bank-c");
    await expect(trust.verify(answer, CARD)).rejects.toMatchObject({ check: "directory" });
    server.directoryBody = undefined;
    const missing = { ...answer, directory: { ...answer.directory, sha256: "0".repeat(64) } };
    await expect(trust.verify(missing, CARD)).rejects.toMatchObject({ check: "fetch" });
    const small = createKeyTrust({
      policy: directory.world.policyJson,
      baseUrl: server.url,
      now: () => NOW,
      maxDirectoryBytes: 100,
    });
    await expect(small.verify(answer, CARD)).rejects.toMatchObject({ check: "fetch" });
    server.requests.length = 0;
    for (const sha256 of ["../../api/v1/receipts/sealed", "A".repeat(64), `${"0".repeat(63)}/`]) {
      const bad = { ...answer, directory: { ...answer.directory, sha256 } };
      await expect(trust.verify(bad, CARD)).rejects.toMatchObject({ check: "answer" });
    }
    expect(server.requests).toEqual([]);
  });

  it("takes the answer as a generated message too: bytes as Uint8Array, indexes as bigint", async () => {
    const answer = serve(directory.honest());
    const bytes = (b64: string) => fromBase64Strict(b64) as Uint8Array;
    const proof = answer.proof as NonNullable<typeof answer.proof>;
    const binding = answer.binding as NonNullable<typeof answer.binding>;
    const message = {
      ...answer,
      binding: { ...binding, statement: bytes(binding.statement), signature: bytes(binding.signature) },
      opening: bytes(answer.opening as string),
      proof: {
        ...proof,
        leafIndex: BigInt(proof.leafIndex),
        treeSize: BigInt(proof.treeSize),
        inclusion: proof.inclusion.map(bytes),
      },
      directory: {
        ...answer.directory,
        index: BigInt(answer.directory.index),
        inclusion: answer.directory.inclusion.map(bytes),
      },
      checkpoint: "",
    };
    expect((await trust.verify(message, CARD)).version).toBe(1);
    const lied = { ...message, proof: { ...message.proof, leafIndex: 2n ** 64n } };
    await expect(trust.verify(lied, CARD)).rejects.toMatchObject({ check: "answer" });
  });

  it("refuses a key whose type is not the suite the answer names", async () => {
    const answer = serve(directory.honest());
    await expect(trust.verify({ ...answer, algorithm: "RSA-OAEP-256" }, CARD)).rejects.toMatchObject({
      check: "key",
    });
  });

  it("needs a trust to seal to an answer, and seals unverified only when told so", async () => {
    const answer = serve(directory.lie("unsigned attacker key"));
    await expect(sealReceipt(RECEIPT, answer, {} as never)).rejects.toThrow(TypeError);
    const envelope = await sealReceipt(RECEIPT, answer, { trust: "unverified" });
    expect(envelope.keyBundle.keyId).toBe(answer.keyId);
    expect(server.requests).toEqual([]);
  });

  it("refuses a stale checkpoint by the policy's clock, even from the cache", async () => {
    const answer = serve(directory.honest());
    let now = NOW;
    const clocked = createKeyTrust({
      policy: directory.world.policyJson,
      baseUrl: server.url,
      now: () => now,
    });
    await clocked.verify(answer, CARD);
    now = NOW + 2 * 3_600_000;
    await expect(clocked.verify(answer, CARD)).rejects.toMatchObject({ check: "checkpoint" });
    expect(snapshotSha256(directory.snapshot)).toBe(answer.directory.sha256);
  });

  it("throws at creation on a policy that breaks the rules (fewer than 3 witnesses)", () => {
    const policy = {
      ...directory.world.policyJson,
      witnesses: directory.world.policyJson.witnesses.slice(0, 2),
    };
    expect(() => createKeyTrust({ policy, baseUrl: server.url })).toThrow(/at least 3 witnesses/);
  });

  it("refuses a hostile value in any member of an honest answer with a KeyVerificationError, never another error", async () => {
    const answer = serve(directory.honest());
    await trust.verify(answer, CARD);
    const hostile: unknown[] = [null, "", -1, 0, 1.5, 2 ** 53, "1", "x".repeat(10_000), [], {}, true];
    hostile.push("AAAA", [""], ["A".repeat(44)], 99);
    const outcomes: string[] = [];
    for (const path of memberPaths(answer)) {
      const original = path.reduce<unknown>((o, k) => (o as Record<string, unknown>)[k], answer);
      for (const value of hostile) {
        if (JSON.stringify(value) === JSON.stringify(original)) continue;
        const outcome = await trust.verify(withMember(answer, path, value) as typeof answer, CARD).then(
          (v) => `accepted${v.isEscrowed ? " as escrow" : ""}`,
          (e: unknown) => (e instanceof KeyVerificationError ? "refused" : `threw ${String(e)}`),
        );
        if (outcome !== "refused")
          outcomes.push(`${path.join(".")}=${JSON.stringify(value)?.slice(0, 40)}: ${outcome}`);
      }
    }
    // The two flags are read as `=== true` (anything else is false: a key answer, checked as one; true
    // for isEscrowed asks for an escrow key, refused), and an int64 may come as its decimal string;
    // every other change is refused by the checks.
    const flags = (name: string) =>
      hostile.filter((v) => v !== true).map((v) => `${name}=${JSON.stringify(v)?.slice(0, 40)}: accepted`);
    expect(outcomes.sort()).toEqual(
      [...flags("isEscrowed"), ...flags("aadBound"), 'proof.leafIndex="1": accepted'].sort(),
    );
    expect(server.sent()).toEqual([]);
  });
});

/**
 * The operator's one move left with a card that rotated away from a key (a lost device): answer the
 * card's earlier binding again. Its leaf stays in the log, so it proves under every later checkpoint,
 * and the issuer's monitor sees no new leaf. A KeyTrust that has verified the newer binding refuses it.
 */
describe("KeyTrust and a card's earlier binding answered again", () => {
  const server = new FixtureServer();
  let directory: Directory;
  beforeAll(() => server.start());
  afterAll(() => server.close());
  beforeEach(() => {
    directory = new Directory();
  });

  const DAY = 86_400_000;
  /** The card's binding of a new key at `version`, starting `daysAgo` days before NOW, logged; its answer. */
  const bound = (version: number, daysAgo: number, supersedes: string | null = null) => {
    const key = makeDeviceKey();
    const statement = bindingOf(directory.bank, key, HASHED_PAN, {
      version,
      supersedes,
      notBefore: formatTime(NOW - daysAgo * DAY),
      notAfter: formatTime(NOW - daysAgo * DAY + 30 * DAY),
    });
    const answer = answerFor(directory.world, {
      statement,
      signer: directory.bank,
      key,
      snapshot: directory.snapshot,
    });
    server.use({ answer, snapshot: directory.snapshot, key });
    return { answer, key };
  };
  const trustWith = (newestBindings?: Map<string, NewestBinding>) =>
    createKeyTrust({
      policy: directory.world.policyJson,
      baseUrl: server.url,
      now: () => NOW,
      ...(newestBindings === undefined ? {} : { newestBindings }),
    });
  const outcome = (trust: KeyTrust, answer: unknown) =>
    trust.verify(answer, CARD).then(
      (v) => `accepted v${v.version}`,
      (e: unknown) => (e instanceof KeyVerificationError ? `refused ${e.check}` : `threw ${String(e)}`),
    );

  it("refuses the binding of a key the card rotated away from once it has verified the newer one", async () => {
    const first = bound(1, 3);
    const second = bound(2, 1, first.key.keyId);
    const trust = trustWith();
    expect(await outcome(trust, first.answer)).toBe("accepted v1");
    expect(await outcome(trust, second.answer)).toBe("accepted v2");
    expect(await outcome(trust, first.answer)).toBe("refused stale");
    expect(await outcome(trust, second.answer)).toBe("accepted v2");
    // A verifier that never saw version 2 cannot tell (docs/key-transparency.md says so) ...
    expect(await outcome(trustWith(), first.answer)).toBe("accepted v1");
    // ... and one given the kept map of another remembers it across a restart.
    const kept = new Map<string, NewestBinding>();
    await trustWith(kept).verify(second.answer, CARD);
    expect(kept.get(HASHED_PAN)).toEqual({ version: 2, notBefore: formatTime(NOW - DAY) });
    expect(await outcome(trustWith(kept), first.answer)).toBe("refused stale");
  });

  it("refuses a lower version starting at the same time, and takes a refresh", async () => {
    const first = bound(1, 2);
    const second = bound(2, 2, first.key.keyId);
    const trust = trustWith();
    expect(await outcome(trust, second.answer)).toBe("accepted v2");
    expect(await outcome(trust, first.answer)).toBe("refused stale");
    const refresh = bound(3, 1, second.key.keyId);
    expect(await outcome(trust, refresh.answer)).toBe("accepted v3");
  });

  it("takes the card registered again after its erasure (version 1, later), then refuses the erased binding", async () => {
    const before = bound(3, 5);
    const again = bound(1, 1);
    const trust = trustWith();
    expect(await outcome(trust, before.answer)).toBe("accepted v3");
    expect(await outcome(trust, again.answer)).toBe("accepted v1");
    expect(await outcome(trust, before.answer)).toBe("refused stale");
  });
});

/** The path of every member (objects and arrays included) of a JSON value. */
function memberPaths(value: unknown, prefix: string[] = []): string[][] {
  if (value === null || typeof value !== "object") return [prefix];
  return [prefix, ...Object.entries(value).flatMap(([k, v]) => memberPaths(v, [...prefix, k]))];
}

/** A copy of `value` with the member at `path` replaced. */
function withMember(value: unknown, path: string[], member: unknown): unknown {
  const [head, ...rest] = path;
  if (head === undefined) return member;
  const copy = (Array.isArray(value) ? [...value] : { ...(value as object) }) as Record<string, unknown>;
  copy[head] = withMember(copy[head], rest, member);
  return copy;
}
