import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type CardIdentity, createKeyTrust, KeyVerificationError } from "../../src/client/key-trust.js";
import { base64url } from "../../src/kt/bytes.js";
import type { TrustPolicy } from "../../src/kt/policy.js";
import { CARD_BIN, Directory, FixtureServer, HASHED_PAN, NOW, type Scenario } from "./kt-fixture.js";

/**
 * KT_ROOT_DELAY in the merchant's trust policy: an issuer's root counts only `rootDelaySeconds`
 * (default 72 h) after the first witnessed checkpoint at which this verifier saw it, measured in the
 * witnesses' time at both ends; a pinned root counts at once; a verifier's memory may be kept across
 * restarts. Every refusal is `root`, before anything is sealed.
 */

const CARD: CardIdentity = { hashedPan: HASHED_PAN, bin: CARD_BIN };
const HOUR = 3_600_000;

describe("the root delay", () => {
  const server = new FixtureServer();
  beforeAll(() => server.start());
  afterAll(() => server.close());

  /** The honest answer, its checkpoint cosigned at `at` (ms). */
  function answerAt(directory: Directory, at: number): Scenario["answer"] {
    const scenario = directory.honest();
    server.use(scenario);
    const proof = scenario.answer.proof as NonNullable<Scenario["answer"]["proof"]>;
    return { ...scenario.answer, proof: { ...proof, checkpoint: directory.world.checkpoint({ at }) } };
  }

  const trustAt = (policy: TrustPolicy, now: number, rootsSeen?: Map<string, number>) =>
    createKeyTrust({
      policy,
      baseUrl: server.url,
      now: () => now,
      ...(rootsSeen === undefined ? {} : { rootsSeen }),
    });

  const refusal = async (promise: Promise<unknown>) => {
    const err = await promise.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KeyVerificationError);
    return (err as KeyVerificationError).check;
  };

  it("refuses a root this verifier first sees now under the default 72 h, and counts one it saw 72 h ago", async () => {
    const directory = new Directory();
    const { rootDelaySeconds: _dev, ...policy } = directory.world.policyJson;
    const answer = answerAt(directory, NOW - 60_000);
    const seen = new Map<string, number>();
    expect(await refusal(trustAt(policy, NOW, seen).verify(answer, CARD))).toBe("root");
    // The sighting is the witnesses' time of that checkpoint, kept for the merchant to store.
    const key = `bank-a ${directory.bank.signingKeyId}`;
    expect(seen.get(key)).toBe(Math.floor((NOW - 60_000) / 1000));

    const witnessed = Math.floor((NOW - 60_000) / 1000);
    const justShort = new Map([[key, witnessed - 72 * 3600 + 1]]);
    expect(await refusal(trustAt(policy, NOW, justShort).verify(answer, CARD))).toBe("root");
    const waited = new Map([[key, witnessed - 72 * 3600]]);
    await expect(trustAt(policy, NOW, waited).verify(answer, CARD)).resolves.toMatchObject({
      issuer: "bank-a",
    });
  });

  it("counts from the first witnessed checkpoint one verifier saw, not from its own clock", async () => {
    const directory = new Directory();
    const policy: TrustPolicy = { ...directory.world.policyJson, rootDelaySeconds: 3600 };
    let now = NOW;
    const trust = createKeyTrust({ policy, baseUrl: server.url, now: () => now });
    expect(await refusal(trust.verify(answerAt(directory, NOW - 60_000), CARD))).toBe("root");
    // The merchant's clock an hour on, the checkpoint still the old one: the witnesses say no time passed.
    now = NOW + HOUR - 120_000;
    expect(await refusal(trust.verify(answerAt(directory, NOW - 60_000), CARD))).toBe("root");
    // A checkpoint the witnesses cosigned a minute short of the hour: not yet; at the hour: it counts.
    expect(await refusal(trust.verify(answerAt(directory, NOW + HOUR - 120_000), CARD))).toBe("root");
    now = NOW + HOUR;
    await expect(trust.verify(answerAt(directory, NOW + HOUR - 60_000), CARD)).resolves.toMatchObject({
      issuer: "bank-a",
    });
    // Another verifier that first sees the root at that checkpoint waits its own hour.
    const late = createKeyTrust({ policy, baseUrl: server.url, now: () => now });
    expect(await refusal(late.verify(answerAt(directory, NOW + HOUR - 60_000), CARD))).toBe("root");
  });

  it("counts a pinned root at once, and a development policy's delay of 0", async () => {
    const directory = new Directory();
    const { rootDelaySeconds: _dev, ...policy } = directory.world.policyJson;
    const answer = answerAt(directory, NOW - 60_000);
    const pin = base64url(new Uint8Array(createHash("sha256").update(directory.bank.spki).digest()));
    const pinned = { ...policy, pinnedRoots: { "bank-a": pin } };
    await expect(trustAt(pinned, NOW).verify(answer, CARD)).resolves.toMatchObject({ issuer: "bank-a" });
    await expect(
      trustAt({ ...policy, rootDelaySeconds: 0 }, NOW).verify(answer, CARD),
    ).resolves.toMatchObject({ issuer: "bank-a" });
    expect(() => trustAt({ ...policy, rootDelaySeconds: -1 }, NOW)).toThrow(/rootDelaySeconds/);
    expect(() => trustAt({ ...policy, rootDelaySeconds: 1.5 }, NOW)).toThrow(/rootDelaySeconds/);
  });
});
