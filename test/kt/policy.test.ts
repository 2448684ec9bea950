import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  COSIGNATURE_ED25519,
  cosignLine,
  formatCheckpoint,
  formatNote,
  formatVkey,
  keyIdOf,
  NOTE_ED25519,
  noteSigner,
  signNoteLine,
} from "../../src/kt/note.js";
import {
  checkCheckpointSignatures,
  checkFreshness,
  DEFAULT_MAX_CHECKPOINT_AGE_SECONDS,
  MAX_CLOCK_SKEW_SECONDS,
  parsePolicy,
  type TrustPolicy,
  verifyCheckpoint,
} from "../../src/kt/policy.js";
import { ORIGIN, World } from "./world.js";

/**
 * The merchant's trust policy from the side of whoever wants a checkpoint trusted without the
 * witnesses' agreement: an operator who lists its own witnesses or one witness twice, a quorum too
 * small to mean anything, a cosignature from the future, a stale one, a witness whose signature fails.
 */

const world = new World();
const [w1, w2, w3] = world.witnesses.map((w) => w.signer) as [
  (typeof world.witnesses)[0]["signer"],
  (typeof world.witnesses)[0]["signer"],
  (typeof world.witnesses)[0]["signer"],
];
const NOW_S = 1_800_000_000;
const text = formatCheckpoint({ origin: ORIGIN, size: 3, root: new Uint8Array(32).fill(3), extensions: [] });

/** The checkpoint text signed by the log and cosigned by each witness given at its own time (seconds). */
function note(cosigns: Array<[typeof w1, number]>, body = text, log = world.log): string {
  return formatNote(body, [signNoteLine(log, body), ...cosigns.map(([w, t]) => cosignLine(w, body, t))]);
}

const refusal = (policy: TrustPolicy) => {
  try {
    parsePolicy(policy);
  } catch (err) {
    return (err as Error).message;
  }
  return "accepted";
};

describe("trust policy: its own rules", () => {
  const base = world.policyJson;
  const vkeys = base.witnesses.map((w) => w.vkey);

  it("accepts the world's policy: three witnesses of two organisations, quorum 2", () => {
    const parsed = parsePolicy(base);
    expect(parsed.logKey.name).toBe(ORIGIN);
    expect(parsed.witnesses.map((w) => [w.key.name, w.organisation])).toEqual([
      ["w1.bank-a.example", "bank-a"],
      ["w2.bank-a.example", "bank-a"],
      ["w3.ngo.example", "ngo"],
    ]);
    // Quorum at the number of witnesses is the most that can be asked.
    expect(refusal({ ...base, quorum: 3 })).toBe("accepted");
  });

  it("refuses a log key that is a cosigner key or not a vkey", () => {
    const message = "trust policy: logKey must be an Ed25519 note vkey";
    expect(refusal({ ...base, logKey: vkeys[0] as string })).toBe(message);
    expect(refusal({ ...base, logKey: "not a vkey" })).toBe(message);
  });

  it("refuses a witness given as a note-signing key, or not a vkey", () => {
    const logVkey = base.logKey;
    const swapped = [{ vkey: logVkey, organisation: "ngo" }, ...base.witnesses.slice(1)];
    expect(refusal({ ...base, witnesses: swapped })).toBe(
      `trust policy: ${logVkey} is not a cosignature vkey`,
    );
    const garbage = [{ vkey: "w+1+2", organisation: "ngo" }, ...base.witnesses.slice(1)];
    expect(refusal({ ...base, witnesses: garbage })).toBe("trust policy: w+1+2 is not a cosignature vkey");
  });

  it("refuses a witness run by the operator, even beside enough others", () => {
    const own = noteSigner("w.operator.example", COSIGNATURE_ED25519, randomBytes(32));
    const witnesses = [...base.witnesses, { vkey: formatVkey(own.key), organisation: "operator" }];
    expect(refusal({ ...base, witnesses })).toBe("trust policy: the operator's witnesses do not count");
  });

  it("refuses one witness listed twice, under two organisations or one", () => {
    const message = "trust policy: a witness is listed twice";
    const first = base.witnesses[0] as TrustPolicy["witnesses"][0];
    expect(refusal({ ...base, witnesses: [...base.witnesses, { ...first, organisation: "ngo-2" }] })).toBe(
      message,
    );
    expect(refusal({ ...base, witnesses: [...base.witnesses, first] })).toBe(message);
    // One key under a second name: a cosignature does not sign the name, so its line can be copied
    // under the other name, and one witness would count as two (of two organisations).
    const key = (world.witnesses[0] as (typeof world.witnesses)[0]).signer.key;
    const name = "w9.other-ngo.example";
    const renamed = { ...key, name, keyId: keyIdOf(name, COSIGNATURE_ED25519, key.publicKey) };
    const again = { vkey: formatVkey(renamed), organisation: "other-ngo" };
    expect(refusal({ ...base, witnesses: [...base.witnesses, again] })).toBe(message);
  });

  it("refuses fewer than 3 witnesses, or witnesses of one organisation", () => {
    expect(refusal({ ...base, witnesses: base.witnesses.slice(1), quorum: 2 })).toBe(
      "trust policy: at least 3 witnesses are needed",
    );
    const oneOrg = base.witnesses.map((w) => ({ ...w, organisation: "bank-a" }));
    expect(refusal({ ...base, witnesses: oneOrg })).toBe(
      "trust policy: witnesses from at least 2 organisations are needed",
    );
  });

  it("refuses a root delay that is negative or not a whole number of seconds; takes 0 and none", () => {
    // A verifier told "-3600" or "0.5" would count a new root at once or early: a mistyped policy
    // must not shorten the delay an issuer's new root waits before it counts.
    const message = "trust policy: rootDelaySeconds must be a whole number of seconds, 0 or more";
    for (const rootDelaySeconds of [-1, -3600, 0.5, 2 ** 53, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(refusal({ ...base, rootDelaySeconds }), String(rootDelaySeconds)).toBe(message);
    }
    for (const rootDelaySeconds of [0, 1, 259_200]) {
      expect(refusal({ ...base, rootDelaySeconds }), String(rootDelaySeconds)).toBe("accepted");
    }
    const { rootDelaySeconds: _none, ...withoutDelay } = base;
    expect(refusal(withoutDelay)).toBe("accepted");
  });

  it("refuses a quorum under 2, over the witnesses, or not a whole number", () => {
    const message = "trust policy: quorum must be at least 2 and at most the number of witnesses";
    for (const quorum of [1, 0, -2, 4, 2.5, Number.NaN]) {
      expect(refusal({ ...base, quorum }), String(quorum)).toBe(message);
    }
  });

  it("refuses a quorum of half the witnesses or fewer: two quorums must share a witness", () => {
    // Witnesses do not talk to each other: with 4 and a quorum of 2, w1 and w3 cosign one tree of a
    // size and w2 and w4 another tree of that size, each pair of two organisations and no witness
    // signing twice, so the operator shows merchants a fork its issuers' monitors never see.
    const more = ["w4.ngo-2.example", "w5.ngo-3.example"].map((name) => ({
      vkey: formatVkey(noteSigner(name, COSIGNATURE_ED25519, randomBytes(32)).key),
      organisation: name.split(".")[1] as string,
    }));
    const four = [...base.witnesses, more[0] as TrustPolicy["witnesses"][0]];
    const message =
      "trust policy: quorum must be more than half of the witnesses, so that any two quorums share one";
    expect(refusal({ ...base, witnesses: four, quorum: 2 })).toBe(message);
    expect(refusal({ ...base, witnesses: four, quorum: 3 })).toBe("accepted");
    expect(refusal({ ...base, witnesses: [...four, ...more.slice(1)], quorum: 3 })).toBe("accepted");
    expect(refusal({ ...base, quorum: 2 })).toBe("accepted");
  });
});

describe("trust policy: a checkpoint's signatures", () => {
  const parsed = world.policy();

  it("refuses what is not a signed checkpoint, or a checkpoint of another log", () => {
    const notCheckpoint = "not a checkpoint\n";
    expect(checkCheckpointSignatures(parsed, "garbage")).toEqual({
      ok: false,
      reason: "checkpoint is not a signed checkpoint note",
    });
    expect(checkCheckpointSignatures(parsed, note([], notCheckpoint))).toEqual({
      ok: false,
      reason: "checkpoint is not a signed checkpoint note",
    });
    const elsewhere = formatCheckpoint({
      origin: "other.example/receipts/kt/v1",
      size: 3,
      root: new Uint8Array(32).fill(3),
      extensions: [],
    });
    expect(checkCheckpointSignatures(parsed, note([[w1, NOW_S]], elsewhere))).toEqual({
      ok: false,
      reason: "checkpoint is of another log (origin)",
    });
  });

  it("refuses a checkpoint the log did not sign, or whose log signature fails", () => {
    const impostor = noteSigner(ORIGIN, NOTE_ED25519, randomBytes(32));
    const unsigned = formatNote(text, [cosignLine(w1, text, NOW_S), cosignLine(w3, text, NOW_S)]);
    expect(checkCheckpointSignatures(parsed, unsigned)).toEqual({
      ok: false,
      reason: "checkpoint log signature is missing",
    });
    // Same name, another key: not the log's key ID, so no signature of the log at all.
    expect(checkCheckpointSignatures(parsed, note([[w1, NOW_S]], text, impostor))).toEqual({
      ok: false,
      reason: "checkpoint log signature is missing",
    });
    // The log's line, moved onto another text.
    const other = formatCheckpoint({ origin: ORIGIN, size: 4, root: new Uint8Array(32), extensions: [] });
    const moved = formatNote(text, [signNoteLine(world.log, other), cosignLine(w1, text, NOW_S)]);
    expect(checkCheckpointSignatures(parsed, moved)).toEqual({
      ok: false,
      reason: "checkpoint log signature is bad",
    });
  });

  it("refuses a checkpoint with a failing cosignature of a policy witness, ignores unknown cosigners", () => {
    const other = formatCheckpoint({ origin: ORIGIN, size: 4, root: new Uint8Array(32), extensions: [] });
    const forged = formatNote(text, [
      signNoteLine(world.log, text),
      cosignLine(w1, text, NOW_S),
      cosignLine(w3, other, NOW_S),
    ]);
    expect(checkCheckpointSignatures(parsed, forged)).toEqual({
      ok: false,
      reason: "checkpoint has a bad cosignature of w3.ngo.example",
    });
    const stranger = noteSigner("w9.elsewhere.example", COSIGNATURE_ED25519, randomBytes(32));
    const signed = checkCheckpointSignatures(
      parsed,
      note([
        [w1, NOW_S - 5],
        [stranger, NOW_S],
        [w3, NOW_S - 9],
      ]),
    );
    expect(signed).toEqual({
      ok: true,
      value: {
        checkpoint: { origin: ORIGIN, size: 3, root: new Uint8Array(32).fill(3), extensions: [] },
        text,
        cosigned: [
          { time: NOW_S - 5, organisation: "bank-a" },
          { time: NOW_S - 9, organisation: "ngo" },
        ],
      },
    });
  });
});

describe("trust policy: the clock", () => {
  const parsed = world.policy();
  const at = (cosigns: Array<[typeof w1, number]>, now: number, policy = parsed) =>
    verifyCheckpoint(policy, note(cosigns), now);

  it("counts a cosignature up to a minute in the future, not one second more", () => {
    const skew = MAX_CLOCK_SKEW_SECONDS;
    expect(
      at(
        [
          [w1, NOW_S + skew],
          [w3, NOW_S],
        ],
        NOW_S,
      ),
    ).toMatchObject({ ok: true });
    expect(
      at(
        [
          [w1, NOW_S + skew + 1],
          [w3, NOW_S],
        ],
        NOW_S,
      ),
    ).toEqual({
      ok: false,
      reason: "checkpoint lacks a witness quorum (1 of 2)",
    });
  });

  it("needs the quorum from two organisations: two witnesses of one bank are not enough", () => {
    expect(
      at(
        [
          [w1, NOW_S],
          [w2, NOW_S],
        ],
        NOW_S,
      ),
    ).toEqual({
      ok: false,
      reason: "checkpoint lacks a witness quorum (2 of 2)",
    });
    expect(at([[w1, NOW_S]], NOW_S)).toEqual({
      ok: false,
      reason: "checkpoint lacks a witness quorum (1 of 2)",
    });
    expect(
      at(
        [
          [w1, NOW_S],
          [w2, NOW_S],
          [w3, NOW_S],
        ],
        NOW_S,
        world.policy({ quorum: 3 }),
      ),
    ).toMatchObject({
      ok: true,
    });
    expect(
      at(
        [
          [w1, NOW_S],
          [w3, NOW_S],
        ],
        NOW_S,
        world.policy({ quorum: 3 }),
      ),
    ).toEqual({
      ok: false,
      reason: "checkpoint lacks a witness quorum (2 of 3)",
    });
  });

  it("dates a checkpoint by the quorum-th newest cosignature: one fresh witness does not make it fresh", () => {
    const max = DEFAULT_MAX_CHECKPOINT_AGE_SECONDS;
    // w3 cosigned just now; the second newest, w1, is what a quorum of 2 vouches for.
    const cosigns: Array<[typeof w1, number]> = [
      [w1, NOW_S - max],
      [w2, NOW_S - 5 * max],
      [w3, NOW_S],
    ];
    expect(at(cosigns, NOW_S)).toEqual({
      ok: true,
      value: {
        checkpoint: { origin: ORIGIN, size: 3, root: new Uint8Array(32).fill(3), extensions: [] },
        text,
        witnessedAt: NOW_S - max,
      },
    });
    expect(at(cosigns, NOW_S + 1)).toEqual({
      ok: false,
      reason: "checkpoint is older than maxCheckpointAge",
    });
    // A quorum of 3 is as fresh as its oldest member.
    expect(at(cosigns, NOW_S, world.policy({ quorum: 3 }))).toMatchObject({
      ok: false,
      reason: "checkpoint is older than maxCheckpointAge",
    });
  });

  it("dates a checkpoint by the freshest quorum from two organisations: one bank's witnesses alone do not make it fresh", () => {
    const max = DEFAULT_MAX_CHECKPOINT_AGE_SECONDS;
    // Both of bank-a's witnesses cosigned just now, the ngo's long ago: only bank-a vouches that
    // the checkpoint is current, so it is as old as the ngo's cosignature.
    const oneBankFresh: Array<[typeof w1, number]> = [
      [w1, NOW_S],
      [w2, NOW_S],
      [w3, NOW_S - 5 * max],
    ];
    expect(at(oneBankFresh, NOW_S)).toEqual({
      ok: false,
      reason: "checkpoint is older than maxCheckpointAge",
    });
    expect(at(oneBankFresh, NOW_S, world.policy({ maxCheckpointAgeSeconds: 6 * max }))).toMatchObject({
      ok: true,
      value: { witnessedAt: NOW_S - 5 * max },
    });
    // With the ngo fresh too, the newest pair of two organisations dates it.
    expect(
      at(
        [
          [w1, NOW_S - 10],
          [w2, NOW_S],
          [w3, NOW_S - 20],
        ],
        NOW_S,
      ),
    ).toMatchObject({ ok: true, value: { witnessedAt: NOW_S - 20 } });
  });

  it("applies the policy's own maximum age", () => {
    const policy = world.policy({ maxCheckpointAgeSeconds: 60 });
    expect(
      at(
        [
          [w1, NOW_S - 60],
          [w3, NOW_S - 60],
        ],
        NOW_S,
        policy,
      ),
    ).toMatchObject({ ok: true });
    expect(
      at(
        [
          [w1, NOW_S - 61],
          [w3, NOW_S - 61],
        ],
        NOW_S,
        policy,
      ),
    ).toEqual({
      ok: false,
      reason: "checkpoint is older than maxCheckpointAge",
    });
  });

  it("checks the clock apart from the signatures: a cached verdict still goes stale", () => {
    const signed = checkCheckpointSignatures(
      parsed,
      note([
        [w1, NOW_S],
        [w3, NOW_S],
      ]),
    );
    if (!signed.ok) throw new Error(signed.reason);
    expect(checkFreshness(parsed, signed.value, NOW_S + 3600).ok).toBe(true);
    expect(checkFreshness(parsed, signed.value, NOW_S + 3601).ok).toBe(false);
  });
});
