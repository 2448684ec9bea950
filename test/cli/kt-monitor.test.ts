import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import {
  EMPTY_STATE,
  type IssuerRecords,
  type MonitorFileState,
  type MonitorSource,
  runMonitor,
} from "../../src/cli/kt-monitor.js";
import { ktMonitorCommand } from "../../src/cli/kt-monitor-command.js";
import { keyRevocationStatement } from "../../src/client/key-binding.js";
import { base64, fromUtf8, toHex, utf8 } from "../../src/kt/bytes.js";
import { CompactRange } from "../../src/kt/compact-range.js";
import { directoryLeaf, statementLeaf } from "../../src/kt/leaves.js";
import { leafHash, MemoryTree } from "../../src/kt/merkle.js";
import { withoutCardRef } from "../../src/kt/statements.js";
import type { KtOpenedEntry } from "../../src/kt/wire.js";
import { nodeSha256 } from "../kt/support.js";
import { bindingOf, type Issuer, makeIssuer, makeUserKey, NOW, snapshotOf, World } from "../kt/world.js";

/**
 * The issuer's monitor, one run after another, against an in-memory log: quiet on honest growth;
 * each substitution of issue 32 reported (a key signed without the issuer, a leaf its feed cannot
 * open, a BIN given away, leaves or history rewritten, a fork); and a log that does not check out
 * leaves the state where it was, so the alert repeats.
 */

const CARD = "c".repeat(64);
/** A card of the bank's that never enrolled. */
const STRANGER = "d".repeat(64);

/** A log the test can bend, serving the monitor as the service would. */
class Log {
  readonly world = new World();
  readonly bank: Issuer = makeIssuer("bank-a");
  readonly other: Issuer = makeIssuer("bank-b");
  readonly feedEntries: KtOpenedEntry[] = [];
  readonly signed: string[] = [];
  /** Replaces served leaves (a store writer), by index. */
  readonly served = new Map<number, Uint8Array>();
  pageSize = 3;
  checkpointNote: string | undefined;

  constructor() {
    this.snapshot([
      ["bank-a", ["411111"]],
      ["bank-b", ["522222"]],
    ]);
  }

  snapshot(owners: Array<[string, string[]]>): void {
    const issuers = owners.map(([tenant, bins]) => ({
      issuer: tenant === "bank-a" ? this.bank : this.other,
      bins,
    }));
    this.world.append(directoryLeaf(snapshotOf(issuers)));
  }

  /** A binding for the card, signed by `signer`; the bank's feed opens its own keys' leaves. */
  bind(
    options: {
      signer?: Issuer;
      signedByBank?: boolean;
      version?: number;
      supersedes?: string | null;
      card?: string;
      userId?: string;
    } = {},
  ) {
    const signer = options.signer ?? this.bank;
    const key = makeUserKey();
    const statement = bindingOf(signer, key, options.card ?? CARD, {
      version: options.version ?? 1,
      supersedes: options.supersedes ?? null,
    });
    const opening = new Uint8Array(randomBytes(16));
    const bytes = utf8(statement);
    const index = this.world.append(
      statementLeaf({ signerSpki: signer.spki, opening, statement: bytes }, nodeSha256),
    );
    if (signer === this.bank) {
      this.feedEntries.push({
        index,
        statementWithoutCardRef: base64(utf8(withoutCardRef(statement))),
        opening: base64(opening),
        signingKeyId: signer.signingKeyId,
        userId: options.userId ?? "usr_1",
      });
      if (options.signedByBank !== false) this.signed.push(toHex(nodeSha256(bytes)));
    }
    return key;
  }

  /** The cards the bank erased, as its records list them. */
  readonly erasedCards: Array<{ cardRef: string; version: number }> = [];

  /** The bank's revocation of the card's key (reason "erased"), logged and opened by its feed. */
  revoke(keyId: string, version: number): void {
    const bytes = keyRevocationStatement({
      issuer: "bank-a",
      card: { hashedPan: CARD },
      bin: "411111",
      keyId,
      version,
      reason: "erased",
    });
    const opening = new Uint8Array(randomBytes(16));
    const index = this.world.append(
      statementLeaf({ signerSpki: this.bank.spki, opening, statement: bytes }, nodeSha256),
    );
    this.feedEntries.push({
      index,
      statementWithoutCardRef: base64(utf8(withoutCardRef(fromUtf8(bytes) as string))),
      opening: base64(opening),
      signingKeyId: this.bank.signingKeyId,
      userId: "usr_1",
    });
    this.signed.push(toHex(nodeSha256(bytes)));
  }

  /** The service's erasure of the user's card: the feed's entries lose statement, opening and user. */
  erase(userId = "usr_1"): void {
    for (const entry of this.feedEntries.filter((e) => e.userId === userId)) {
      Object.assign(entry, {
        statementWithoutCardRef: "",
        opening: "",
        signingKeyId: "",
        userId: "",
        erased: true,
      });
    }
  }

  records(): IssuerRecords {
    return {
      issuer: "bank-a",
      signingKeys: [base64(this.bank.spki)],
      prefixes: ["411111"],
      cards: [
        { cardRef: CARD, userId: "usr_1" },
        { cardRef: STRANGER, enrolled: false },
      ],
      signed: this.signed,
      ...(this.erasedCards.length === 0 ? {} : { erased: this.erasedCards }),
    };
  }

  source(): MonitorSource {
    return {
      checkpoint: async () => this.checkpointNote ?? this.world.checkpoint(),
      consistency: async (from, to) => this.world.tree.consistencyProof(from, to),
      leaves: async (start, end) =>
        this.world.leaves
          .slice(start, Math.min(end, start + this.pageSize))
          .map((leaf, i) => this.served.get(start + i) ?? leaf),
      feed: async (from) => this.feedEntries.filter((e) => e.index >= from),
    };
  }

  run(state: MonitorFileState, now = NOW) {
    return runMonitor(this.source(), this.world.policy(), this.records(), state, now, nodeSha256);
  }
}

const messages = (run: { alerts: Array<{ message: string }> }) => run.alerts.map((a) => a.message);

describe("receipts kt monitor, run by run", () => {
  it("is quiet on honest growth, reads each leaf once, and keeps only a compact range", async () => {
    const log = new Log();
    const key = log.bind();
    const first = await log.run(EMPTY_STATE);
    expect(messages(first)).toEqual([]);
    expect(first.leavesRead).toBe(2);
    log.bind({ version: 2, supersedes: key.keyId });
    for (let i = 0; i < 4; i++) log.world.append(new Uint8Array([3, ...utf8("{}")]));
    const second = await log.run(first.state);
    expect(second.leavesRead).toBe(5);
    expect(second.state.checkpoint?.size).toBe(7);
    expect(second.state.range.nodes.length).toBe(3);
    // Nothing new: nothing read, nothing said.
    const third = await log.run(second.state);
    expect([third.leavesRead, messages(third)]).toEqual([0, []]);
  });

  it("reports a binding under its key that it did not sign (the operator or a thief with its signing key)", async () => {
    const log = new Log();
    log.bind({ signedByBank: false });
    const run = await log.run(EMPTY_STATE);
    expect(messages(run)).toContain("a statement under your signing key that you did not sign");
    expect(run.alerts[0]?.index).toBe(1);
  });

  it("reports a leaf under its key that its feed does not open (a store writer's leaf)", async () => {
    const log = new Log();
    log.bind();
    log.feedEntries.length = 0;
    const run = await log.run(EMPTY_STATE);
    expect(messages(run)).toEqual(["a leaf under your signing key that your feed does not open"]);
  });

  it("is quiet on a card it erased with a revocation, whether it read the binding before or not", async () => {
    const log = new Log();
    const key = log.bind();
    const first = await log.run(EMPTY_STATE);
    expect(messages(first)).toEqual([]);
    log.revoke(key.keyId, 2);
    log.erase();
    // Without the erasure in its records, an erased leaf is a leaf its feed does not open.
    expect(messages(await log.run(first.state))).toEqual([
      "a leaf under your signing key that your feed does not open",
    ]);
    log.erasedCards.push({ cardRef: CARD, version: 2 });
    const second = await log.run(first.state);
    expect(messages(second)).toEqual([]);
    // The card enrolled again starts at version 1, as the log's sequence does after an erasure.
    log.bind();
    expect(messages(await log.run(second.state))).toEqual([]);
    // Bound, revoked and erased between two runs: both leaves are the erasure's.
    const unread = new Log();
    const k = unread.bind();
    unread.revoke(k.keyId, 2);
    unread.erase();
    unread.erasedCards.push({ cardRef: CARD, version: 2 });
    expect(messages(await unread.run(EMPTY_STATE))).toEqual([]);
  });

  it("reports an erased leaf beyond what its erasures account for (a statement hidden behind an erasure)", async () => {
    const log = new Log();
    const key = log.bind();
    log.revoke(key.keyId, 2);
    // A thief's binding the service reports as erased too: three erased leaves, two accounted for.
    log.bind({ signedByBank: false, version: 3 });
    log.erase();
    log.erasedCards.push({ cardRef: CARD, version: 2 });
    const run = await log.run(EMPTY_STATE);
    expect(messages(run)).toEqual(["a leaf under your signing key that your feed does not open"]);
    expect(run.alerts[0]?.index).toBe(3);
  });

  it("reports the operator giving its BIN to another issuer", async () => {
    const log = new Log();
    const first = await log.run(EMPTY_STATE);
    log.snapshot([
      ["bank-a", []],
      ["bank-b", ["522222", "41111111"]],
    ]);
    const run = await log.run(first.state);
    expect(messages(run)).toEqual(["the directory gives your prefix 41111111 to bank-b"]);
  });

  it("reports leaves that are not the checkpoint's, and keeps its state until they are", async () => {
    const log = new Log();
    log.bind();
    log.served.set(1, new Uint8Array([1, ...randomBytes(40)]));
    const run = await log.run(EMPTY_STATE);
    expect(messages(run)).toEqual(["the leaves the log serves are not those of its checkpoint of 2"]);
    expect(run.state).toBe(EMPTY_STATE);
    log.served.clear();
    expect(messages(await log.run(run.state))).toEqual([]);
  });

  it("reports a fork, a rewrite and a shrink on every run, without moving on", async () => {
    const log = new Log();
    log.bind();
    const first = await log.run(EMPTY_STATE);
    // The same size with another root: a fork.
    const fork = new World();
    Object.defineProperty(fork, "log", { value: log.world.log });
    fork.append(log.world.leaves[0] as Uint8Array);
    fork.append(new Uint8Array([1, ...randomBytes(40)]));
    log.checkpointNote = fork.checkpoint();
    for (let i = 0; i < 2; i++) {
      const run = await log.run(first.state);
      expect(messages(run)).toContain("the log's tree of 2 leaves is not an extension of the one of 2");
      expect(run.state).toBe(first.state);
    }
    // A longer tree that rewrites the past.
    fork.append(new Uint8Array([1, ...randomBytes(40)]));
    log.checkpointNote = fork.checkpoint();
    const source = log.source();
    source.consistency = async (from, to) => fork.tree.consistencyProof(from, to);
    const rewrite = await runMonitor(source, log.world.policy(), log.records(), first.state, NOW, nodeSha256);
    expect(messages(rewrite)).toContain("the log's tree of 3 leaves is not an extension of the one of 2");
    // A shorter one.
    log.checkpointNote = log.world.checkpoint({ size: 1 });
    expect(messages(await log.run(first.state))).toEqual(["the log shrank from 2 to 1 leaves"]);
  });

  it("moves on from an empty log without asking for a proof from size 0", async () => {
    const log = new Log();
    const source = log.source();
    source.checkpoint = async () => log.world.checkpoint({ size: 0 });
    const first = await runMonitor(source, log.world.policy(), log.records(), EMPTY_STATE, NOW, nodeSha256);
    expect([messages(first), first.state.checkpoint?.size]).toEqual([[], 0]);
    log.bind();
    source.checkpoint = async () => log.world.checkpoint();
    source.consistency = async () => {
      throw new Error("no proof from size 0");
    };
    const second = await runMonitor(source, log.world.policy(), log.records(), first.state, NOW, nodeSha256);
    expect([messages(second), second.leavesRead]).toEqual([[], 2]);
  });

  it("reports a checkpoint the log did not sign, and one that lacks a fresh witness quorum", async () => {
    const log = new Log();
    const stranger = new World();
    for (const leaf of log.world.leaves) stranger.append(leaf);
    log.checkpointNote = stranger.checkpoint();
    const unsigned = await log.run(EMPTY_STATE);
    expect(messages(unsigned)).toEqual([
      "the log's checkpoint does not verify: checkpoint log signature is missing",
    ]);
    log.checkpointNote = log.world.checkpoint({ cosigners: [0] });
    const lonely = await log.run(EMPTY_STATE);
    expect(messages(lonely)[0]).toMatch(
      /^the log's checkpoint is not freshly witnessed: checkpoint lacks a witness quorum/,
    );
    log.checkpointNote = undefined;
    const stale = await log.run(EMPTY_STATE, NOW + 3 * 3_600_000);
    expect(messages(stale)).toEqual([
      "the log's checkpoint is not freshly witnessed: checkpoint is older than maxCheckpointAge",
    ]);
  });

  it("reports a second unrevoked binding for one card, and a first binding for a card it never enrolled", async () => {
    const log = new Log();
    log.bind();
    log.bind({ version: 2 });
    log.bind({ card: STRANGER, userId: "usr_planted" });
    log.bind({ card: "e".repeat(64), userId: "usr_unknown" });
    const run = await log.run(EMPTY_STATE);
    expect(messages(run).map((m) => m.split(":")[0])).toEqual([
      "a card statement out of order (a second unrevoked binding?)",
      "a binding for a card your records show as not enrolled",
      "a leaf under your signing key that your feed does not open",
    ]);
  });
});

describe("receipts kt monitor, the command", () => {
  /** The log's HTTP reads, answered from the in-memory log (as the service's routes answer). */
  function fetchOf(log: Log): typeof fetch {
    return (async (input: URL | string) => {
      const url = new URL(String(input));
      const q = (name: string) => Number(url.searchParams.get(name));
      const json = (data: unknown) => new Response(JSON.stringify({ success: true, data }), { status: 200 });
      if (url.pathname === "/kt/v1/checkpoint") return new Response(log.world.checkpoint(), { status: 200 });
      if (url.pathname === "/kt/v1/proof/consistency")
        return json({ proof: log.world.tree.consistencyProof(q("from"), q("to")).map(base64) });
      if (url.pathname === "/kt/v1/entries") {
        const start = q("start");
        const leaves = log.world.leaves.slice(start, q("end"));
        return json({ entries: leaves.map((leaf, i) => ({ index: start + i, leaf: base64(leaf) })) });
      }
      if (url.pathname === "/api/v1/kt/entries") {
        const after = url.searchParams.has("after") ? q("after") : -1;
        return json({ entries: log.feedEntries.filter((e) => e.index > after), nextPageToken: "" });
      }
      return new Response("no", { status: 404 });
    }) as typeof fetch;
  }

  it("keeps its state in a file between runs, prints one line per alert and exits 3, or ok and 0", async () => {
    const dir = mkdtempSync(join(tmpdir(), "kt-monitor-"));
    try {
      const log = new Log();
      log.bind();
      const files = {
        policy: join(dir, "policy.json"),
        records: join(dir, "records.json"),
        state: join(dir, "state.json"),
      };
      writeFileSync(files.policy, JSON.stringify(log.world.policyJson));
      writeFileSync(files.records, JSON.stringify(log.records()));
      const args = [
        "--url",
        "http://log.test",
        "--issuer-key",
        "rk_test_x",
        "--policy",
        files.policy,
        "--records",
        files.records,
        "--state",
        files.state,
      ];
      const run = async (extra: string[] = []) => {
        let text = "";
        const out = new Writable({
          write: (chunk, _e, done) => {
            text += String(chunk);
            done();
          },
        });
        const code = await ktMonitorCommand([...args, ...extra], out, {}, fetchOf(log), () => NOW);
        return { code, text };
      };
      expect(await run()).toEqual({ code: 0, text: "ok: tree size 2, 2 new leaves, nothing to report\n" });
      expect(JSON.parse(readFileSync(files.state, "utf8")).checkpoint.size).toBe(2);
      log.bind({ signedByBank: false, version: 2 });
      log.feedEntries.pop();
      const alarmed = await run();
      expect(alarmed).toEqual({
        code: 3,
        text: "alert: leaf 2: a leaf under your signing key that your feed does not open\n",
      });
      expect(await run(["--json"])).toEqual({
        code: 0,
        text: `${JSON.stringify({ treeSize: 3, leavesRead: 0, alerts: [] })}\n`,
      });
      writeFileSync(files.state, "{}");
      await expect(run()).rejects.toThrow(/not a monitor state/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("reports a root change it did not sign in one line, once, through the command", async () => {
    const dir = mkdtempSync(join(tmpdir(), "kt-monitor-root-"));
    try {
      const log = new Log();
      const files = { policy: join(dir, "p.json"), records: join(dir, "r.json"), state: join(dir, "s.json") };
      writeFileSync(files.policy, JSON.stringify(log.world.policyJson));
      writeFileSync(files.records, JSON.stringify(log.records()));
      const args = ["--url", "http://log.test", "--issuer-key", "rk_test_x"];
      const run = async () => {
        let text = "";
        const out = new Writable({
          write: (chunk, _e, done) => {
            text += String(chunk);
            done();
          },
        });
        const paths = ["--policy", files.policy, "--records", files.records, "--state", files.state];
        const code = await ktMonitorCommand([...args, ...paths], out, {}, fetchOf(log), () => NOW);
        return { code, text };
      };
      expect((await run()).code).toBe(0);
      // The operator (or a store writer) puts a root of its own in the bank's place.
      const taken = makeIssuer("bank-a");
      log.world.append(directoryLeaf(snapshotOf([{ issuer: taken, bins: ["411111"] }])));
      const alarmed = await run();
      expect(alarmed.code).toBe(3);
      expect(alarmed.text.split("\n").filter((line) => line.includes("root"))).toEqual([
        `alert: leaf 1: your root changed from ${log.bank.signingKeyId} to ${taken.signingKeyId}, a change you did not sign`,
      ]);
      // The next snapshot keeps it: the key is still not the bank's, but the change is told once.
      log.world.append(directoryLeaf(snapshotOf([{ issuer: taken, bins: ["411111"] }])));
      expect((await run()).text).not.toContain("your root changed");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("CompactRange", () => {
  it("has the root of every tree size up to 70, and survives its JSON", () => {
    const tree = new MemoryTree([], nodeSha256);
    let range = CompactRange.empty(nodeSha256);
    for (let n = 0; n <= 70; n++) {
      expect(toHex(range.root())).toBe(toHex(tree.root()));
      const again = CompactRange.fromJson(range.toJson(), nodeSha256);
      expect(again && toHex(again.root())).toBe(toHex(tree.root()));
      const leaf = leafHash(new Uint8Array([n]), nodeSha256);
      tree.append(leaf);
      range.append(leaf);
      if (n === 35) range = CompactRange.fromJson(range.toJson(), nodeSha256) as CompactRange;
    }
    expect(CompactRange.fromJson({ size: 3, nodes: [base64(new Uint8Array(32))] })).toBeUndefined();
  });
});
