import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { toHex, utf8 } from "../../src/kt/bytes.js";
import { canonicalJson, type Json } from "../../src/kt/json.js";
import { directoryLeaf, statementLeaf } from "../../src/kt/leaves.js";
import { EMPTY_MONITOR_STATE, type MonitorConfig, monitor } from "../../src/kt/monitor.js";
import { signerHashOf } from "../../src/kt/signatures.js";
import { CARD_TRANSFER_TYPE, transferCommitment, transferLeaf } from "../../src/kt/transfer.js";
import { nodeSha256 } from "./support.js";
import { bindingOf, makeIssuer, makeUserKey, snapshotOf } from "./world.js";

/**
 * The issuer's monitor on the substitutions of issue 32: a stolen signing key (a statement the issuer
 * did not sign), the operator (a directory entry or BIN the issuer did not change), a store writer (a
 * leaf under the issuer's key its feed cannot open; a binding for a card it never enrolled), and the
 * other alarms (docs/key-transparency.md, "The issuer's monitor").
 */

const bank = makeIssuer("bank-a");
const other = makeIssuer("bank-b");
const CARD = "c".repeat(64);

function leafOf(statement: string, signer = bank, opening = new Uint8Array(randomBytes(16)), par?: string) {
  const bytes = utf8(statement);
  return {
    leaf: statementLeaf({ signerSpki: signer.spki, opening, statement: bytes, par }),
    statement: bytes,
    opening,
  };
}

function config(changes: Partial<MonitorConfig> = {}): MonitorConfig {
  return {
    issuer: "bank-a",
    signerHashes: [toHex(signerHashOf(bank.spki))],
    pars: ["P".repeat(29)],
    enrolled: [CARD],
    signed: [],
    prefixes: ["411111"],
    ...changes,
  };
}

describe("monitor", () => {
  it("stays quiet on its own honest entries and keeps its place between runs", () => {
    const key = makeUserKey();
    const a = leafOf(bindingOf(bank, key, CARD));
    const run = monitor(config({ signed: [toHex(nodeSha256(a.statement))] }), EMPTY_MONITOR_STATE, {
      leaves: [a.leaf],
      opened: new Map([[0, { statement: a.statement, opening: a.opening }]]),
      witnessCheckpoints: [],
    });
    expect(run.alerts).toEqual([]);
    expect(run.state.next).toBe(1);
    expect(run.state.cards[CARD]?.active?.keyId).toBe(key.keyId);
  });

  it("alarms on a statement under its key that it did not sign (a stolen signing key)", () => {
    const a = leafOf(bindingOf(bank, makeUserKey(), CARD));
    const run = monitor(config(), EMPTY_MONITOR_STATE, {
      leaves: [a.leaf],
      opened: new Map([[0, { statement: a.statement, opening: a.opening }]]),
      witnessCheckpoints: [],
    });
    expect(run.alerts.map((x) => x.message)).toEqual([
      "a statement under your signing key that you did not sign",
    ]);
  });

  it("alarms on a leaf under its key that its feed does not open, or opens wrongly (a store writer)", () => {
    const a = leafOf(bindingOf(bank, makeUserKey(), CARD));
    const wrong = { statement: a.statement, opening: new Uint8Array(16) };
    for (const opened of [new Map(), new Map([[0, wrong]])]) {
      const run = monitor(config(), EMPTY_MONITOR_STATE, {
        leaves: [a.leaf],
        opened,
        witnessCheckpoints: [],
      });
      expect(run.alerts.map((x) => x.message)).toEqual([
        "a leaf under your signing key that your feed does not open",
      ]);
    }
  });

  it("alarms on a first binding of a card it never enrolled, and on a second unrevoked binding", () => {
    const first = leafOf(bindingOf(bank, makeUserKey(), "d".repeat(64)));
    const second = leafOf(bindingOf(bank, makeUserKey(), "d".repeat(64)));
    const signed = [first, second].map((x) => toHex(nodeSha256(x.statement)));
    const run = monitor(config({ signed }), EMPTY_MONITOR_STATE, {
      leaves: [first.leaf, second.leaf],
      opened: new Map([
        [0, first],
        [1, second],
      ]),
      witnessCheckpoints: [],
    });
    expect(run.alerts.map((x) => x.message)).toEqual([
      "a binding for a card your records show as not enrolled",
      expect.stringContaining("out of order"),
    ]);
  });

  it("tells a card enrolled again after its erasure, unrevoked, from a sequence rolled back to version 1", () => {
    // Run 1: the card bound at version 1 and rotated at version 2, both read.
    const [k1, k2, k3] = [makeUserKey(), makeUserKey(), makeUserKey()];
    const v1 = leafOf(bindingOf(bank, k1, CARD));
    const v2 = leafOf(bindingOf(bank, k2, CARD, { version: 2, supersedes: k1.keyId }));
    const again = leafOf(bindingOf(bank, k3, CARD));
    const signed = [v1, v2, again].map((x) => toHex(nodeSha256(x.statement)));
    const first = monitor(config({ signed }), EMPTY_MONITOR_STATE, {
      leaves: [v1.leaf, v2.leaf],
      opened: new Map([
        [0, v1],
        [1, v2],
      ]),
      witnessCheckpoints: [],
    });
    expect(first.alerts).toEqual([]);
    // Run 2: the card's version 1 again, a new key; the two earlier leaves now read as erased.
    const input = {
      leaves: [again.leaf],
      opened: new Map([[2, again]]),
      erased: new Set([0, 1]),
      witnessCheckpoints: [],
    };
    // The bank erased the card without a revocation (its last statement version 2) and enrolled it again.
    const enrolledAgain = monitor(
      config({ signed, erased: [{ cardRef: CARD, version: 2 }] }),
      first.state,
      input,
    );
    expect(enrolledAgain.alerts).toEqual([]);
    expect(enrolledAgain.state.cards[CARD]).toMatchObject({ version: 1, active: { keyId: k3.keyId } });
    // No erasure in its records: the same version 1 is a rolled-back sequence.
    const rolledBack = monitor(config({ signed }), first.state, { ...input, erased: new Set<number>() });
    expect(rolledBack.alerts.map((x) => x.message)).toEqual([expect.stringContaining("out of order")]);
  });

  it("alarms on a directory change it did not make (the operator), and on its PAR under another signer", () => {
    const mine = snapshotOf([{ issuer: bank, bins: ["411111"] }]);
    const expectedEntry = canonicalJson((JSON.parse(mine) as { issuers: Json[] }).issuers[0] as Json);
    const moved = snapshotOf([
      { issuer: bank, bins: ["411111"] },
      { issuer: other, bins: ["41111122"] },
    ]);
    const rekeyed = snapshotOf([{ issuer: makeIssuer("bank-a"), bins: ["411111"] }]);
    const par = leafOf(bindingOf(other, makeUserKey(), "P".repeat(29)), other, undefined, "P".repeat(29));
    const run = monitor(config({ expectedEntry }), EMPTY_MONITOR_STATE, {
      leaves: [directoryLeaf(mine), directoryLeaf(moved), directoryLeaf(rekeyed), par.leaf],
      opened: new Map(),
      witnessCheckpoints: [],
    });
    const rogue = (
      JSON.parse(rekeyed) as { issuers: Array<{ signingKeys: Array<{ signingKeyId: string }> }> }
    ).issuers[0]?.signingKeys[0]?.signingKeyId;
    expect(run.alerts).toEqual([
      { index: 1, message: "the directory gives your prefix 41111122 to bank-b" },
      {
        index: 2,
        message: `your root changed from ${bank.signingKeyId} to ${rogue}, a change you did not sign`,
      },
      { index: 2, message: "the directory's entry for you is not what your records say" },
      { index: 2, message: `the directory lists a signing key for you that is not yours (${rogue})` },
      { index: 3, message: "a statement about one of your PAR cards signed by another issuer's key" },
    ]);
  });

  it("alarms on a signing key or escrow key listed for it that is not its own (the operator or a store writer), without an expected entry", () => {
    const planted = makeIssuer("bank-a");
    const escrow = makeUserKey();
    const ref = {
      keyId: "iek_planted",
      algorithm: "HPKE-P256-SHA256-A256GCM",
      spkiSha256: escrow.spkiSha256,
    };
    const snapshot = JSON.parse(snapshotOf([{ issuer: bank, bins: ["411111"], escrowKey: ref }])) as {
      issuers: Array<{ signingKeys: Json[] }>;
    };
    const extra = JSON.parse(snapshotOf([{ issuer: planted, bins: [] }])) as {
      issuers: Array<{ signingKeys: Json[] }>;
    };
    snapshot.issuers[0]?.signingKeys.push(...(extra.issuers[0]?.signingKeys ?? []));
    const leaf = directoryLeaf(canonicalJson(snapshot as unknown as Json));
    const run = monitor(config({ escrowKeyIds: ["iek_mine"] }), EMPTY_MONITOR_STATE, {
      leaves: [leaf],
      opened: new Map(),
      witnessCheckpoints: [],
    });
    expect(run.alerts).toEqual([
      {
        index: 0,
        message: `the directory lists a signing key for you that is not yours (${planted.signingKeyId})`,
      },
      { index: 0, message: "the directory lists an escrow key for you that is not yours (iek_planted)" },
    ]);
    const quiet = monitor(
      config({
        escrowKeyIds: ["iek_planted"],
        signerHashes: [bank, planted].map((i) => toHex(signerHashOf(i.spki))),
      }),
      EMPTY_MONITOR_STATE,
      {
        leaves: [leaf],
        opened: new Map(),
        witnessCheckpoints: [],
      },
    );
    expect(quiet.alerts).toEqual([]);
  });

  it("alarms when a witness cosigned two roots for one size, across runs", () => {
    const first = monitor(config(), EMPTY_MONITOR_STATE, {
      leaves: [],
      opened: new Map(),
      witnessCheckpoints: [{ witness: "w1", size: 10, root: new Uint8Array(32).fill(1) }],
    });
    expect(first.alerts).toEqual([]);
    const second = monitor(config(), first.state, {
      leaves: [],
      opened: new Map(),
      witnessCheckpoints: [{ witness: "w1", size: 10, root: new Uint8Array(32).fill(2) }],
    });
    expect(second.alerts.map((x) => x.message)).toEqual(["witness w1 cosigned two roots for tree size 10"]);
  });
  it("reports the operator's transfer of one of its cards once, whatever references it names", () => {
    const entry = (from: string, to: string, transfer: string, version = 2) =>
      transferLeaf({
        v: 1,
        type: CARD_TRANSFER_TYPE,
        transfer,
        from,
        to,
        card: transferCommitment(new Uint8Array(16), `key-${version}`),
        version,
        transferredAt: "2026-11-26T10:00:00Z",
      }).leaf;
    const t1 = `trf_${"a".repeat(32)}`;
    const t2 = `trf_${"b".repeat(32)}`;
    const broken = directoryLeaf(canonicalJson({ v: 1, type: CARD_TRANSFER_TYPE, from: "bank-a" } as Json));
    const run = monitor(config(), EMPTY_MONITOR_STATE, {
      // Two entries of one transfer (hashed PAN and PAR), one of a card moved to it, and a broken one.
      leaves: [
        entry("bank-a", "bank-b", t1),
        entry("bank-a", "bank-b", t1, 3),
        entry("bank-b", "bank-a", t2),
        broken,
      ],
      opened: new Map(),
      witnessCheckpoints: [],
    });
    expect(run.alerts).toEqual([
      {
        index: 0,
        message: `the operator transferred one of your cards to bank-b (${t1}, 2026-11-26T10:00:00Z): your key for it is retired`,
      },
      { index: 3, message: 'a card transfer entry that is not valid: lacks the member "transfer"' },
    ]);
    expect(run.state.next).toBe(4);
  });

  describe("root changes", () => {
    const rootA = makeIssuer("bank-a");
    const rootB = makeIssuer("bank-a");
    const rootC = makeIssuer("bank-a");
    const hashes = [rootA, rootB].map((k) => toHex(signerHashOf(k.spki)));

    /** A snapshot listing bank-a's roots with these statuses. */
    function rootsSnapshot(keys: Array<[ReturnType<typeof makeIssuer>, "current" | "revoked" | "pending"]>) {
      const snapshot = JSON.parse(snapshotOf([{ issuer: rootA, bins: ["411111"] }])) as {
        issuers: Array<{ signingKeys: Array<Record<string, Json>> }>;
      };
      const template = snapshot.issuers[0]?.signingKeys[0] as Record<string, Json>;
      (snapshot.issuers[0] as { signingKeys: Json[] }).signingKeys = keys.map(([k, status]) => ({
        ...template,
        signingKeyId: k.signingKeyId,
        spki: Buffer.from(k.spki).toString("base64"),
        status,
      }));
      return directoryLeaf(canonicalJson(snapshot as unknown as Json));
    }

    function signedBy(signer: ReturnType<typeof makeIssuer>, statement: Record<string, Json>) {
      const text = canonicalJson({ v: 1, issuer: "bank-a", ...statement } as Json);
      return leafOf(text, signer);
    }
    const rotation = (to: ReturnType<typeof makeIssuer>, version: number) => ({
      type: "receipts.v1/signing-key",
      signingKeyId: to.signingKeyId,
      algorithm: "Ed25519",
      spki: Buffer.from(to.spki).toString("base64"),
      role: "root",
      version,
      issuedAt: "2026-11-25T10:00:00Z",
    });
    const revocation = (of: ReturnType<typeof makeIssuer>, version: number) => ({
      type: "receipts.v1/signing-key-revocation",
      signingKeyId: of.signingKeyId,
      version,
      revokedAt: "2026-11-25T10:00:00Z",
    });

    /** One run over `leaves`; the issuer's records hold every statement leaf but those in `notSigned`. */
    function run(
      leaves: Array<Uint8Array | ReturnType<typeof leafOf>>,
      previous = EMPTY_MONITOR_STATE,
      notSigned: ReadonlyArray<ReturnType<typeof leafOf>> = [],
    ) {
      const opened = new Map<number, { statement: Uint8Array; opening: Uint8Array }>();
      const signed: string[] = [];
      const bytes = leaves.map((leaf, i) => {
        if (leaf instanceof Uint8Array) return leaf;
        opened.set(previous.next + i, leaf);
        if (!notSigned.includes(leaf)) signed.push(toHex(nodeSha256(leaf.statement)));
        return leaf.leaf;
      });
      return monitor(config({ signerHashes: hashes, signed }), previous, {
        leaves: bytes,
        opened,
        witnessCheckpoints: [],
      });
    }

    it("stays quiet on a rotation and on a revocation and recovery it signed", () => {
      const rotated = run([
        rootsSnapshot([[rootA, "current"]]),
        signedBy(rootA, rotation(rootB, 1)),
        rootsSnapshot([
          [rootA, "revoked"],
          [rootB, "current"],
        ]),
      ]);
      expect(rotated.alerts).toEqual([]);
      expect(rotated.state.root?.id).toBe(rootB.signingKeyId);
      const recovered = run([
        rootsSnapshot([[rootA, "current"]]),
        signedBy(rootA, revocation(rootA, 1)),
        rootsSnapshot([[rootA, "revoked"]]),
        rootsSnapshot([
          [rootA, "revoked"],
          [rootB, "pending"],
        ]),
        rootsSnapshot([
          [rootA, "revoked"],
          [rootB, "current"],
        ]),
      ]);
      expect(recovered.alerts).toEqual([]);
    });

    it("alarms on a rotation its stolen root signed for a thief's key, which merchants would count at once", () => {
      // The thief holds rootA (and an issuer API key): its rotation to rootC is signed by the bank's
      // root, so the answers carry it as rootRotation and merchants honour rootC without the delay.
      // The bank's monitor is what sees it: a statement it did not sign, and a root change to a key
      // that is not its own.
      const theft = signedBy(rootA, rotation(rootC, 1));
      const taken = run(
        [
          rootsSnapshot([[rootA, "current"]]),
          theft,
          rootsSnapshot([
            [rootA, "revoked"],
            [rootC, "current"],
          ]),
        ],
        EMPTY_MONITOR_STATE,
        [theft],
      );
      expect(taken.alerts.map((a) => a.message)).toEqual([
        "a statement under your signing key that you did not sign",
        `your root changed from ${rootA.signingKeyId} to ${rootC.signingKeyId}, a change you did not sign`,
        `the directory lists a signing key for you that is not yours (${rootC.signingKeyId})`,
      ]);
    });

    it("alarms with one line on a root change it did not sign, also across runs", () => {
      // The operator confirms a recovery root (even one of the bank's keys) while the root is live.
      const first = run([rootsSnapshot([[rootA, "current"]])]);
      expect(first.alerts).toEqual([]);
      const swapped = run(
        [
          rootsSnapshot([
            [rootA, "revoked"],
            [rootB, "current"],
          ]),
          rootsSnapshot([
            [rootA, "revoked"],
            [rootB, "current"],
          ]),
        ],
        first.state,
      );
      expect(swapped.alerts).toEqual([
        {
          index: 1,
          message: `your root changed from ${rootA.signingKeyId} to ${rootB.signingKeyId}, a change you did not sign`,
        },
      ]);
      // A rotation it signed, then a store writer's root: one line for the change, beside the foreign key's.
      const taken = run([
        rootsSnapshot([[rootA, "current"]]),
        signedBy(rootA, rotation(rootB, 1)),
        rootsSnapshot([
          [rootA, "revoked"],
          [rootB, "current"],
        ]),
        rootsSnapshot([
          [rootA, "revoked"],
          [rootB, "revoked"],
          [rootC, "current"],
        ]),
      ]);
      expect(taken.alerts.map((a) => a.message)).toEqual([
        `your root changed from ${rootB.signingKeyId} to ${rootC.signingKeyId}, a change you did not sign`,
        `the directory lists a signing key for you that is not yours (${rootC.signingKeyId})`,
      ]);
      // A root revoked without its statement: the change to none is the alarm.
      const revoked = run([rootsSnapshot([[rootA, "current"]]), rootsSnapshot([[rootA, "revoked"]])]);
      expect(revoked.alerts.map((a) => a.message)).toEqual([
        `your root changed from ${rootA.signingKeyId} to none, a change you did not sign`,
      ]);
    });
  });
});
