import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EXIT, runCli } from "../../src/cli/main.js";
import { FakeClock } from "../../src/clock.js";
import { base64 } from "../../src/kt/bytes.js";
import { COSIGNATURE_ED25519, NOTE_ED25519, parseVkey } from "../../src/kt/note.js";
import { parseNoteSkey } from "../../src/kt/note-keys.js";
import { makeIssuer } from "../kt/world.js";
import { ktConfig, ktRig, pendingOf, signedBinding, testCard, userKey } from "../support/kt.js";

const ROOT = join(import.meta.dirname, "..", "..");

function capture(): Writable & { text: () => string } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      chunks.push(String(chunk));
      done();
    },
  });
  return Object.assign(stream, { text: () => chunks.join("") });
}

describe("the command line's key log commands", { timeout: 240_000 }, () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "kt-cli-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("makes the log's key and a witness's, each in a new file of mode 600, and prints the vkey", async () => {
    const logFile = join(dir, "log.key");
    const out = capture();
    expect(await runCli(["kt", "keygen", "--host", "kt.example.com", "--out", logFile], out, capture())).toBe(
      EXIT.ok,
    );
    const skey = parseNoteSkey(readFileSync(logFile, "utf8"), [NOTE_ED25519]);
    expect(skey.ok && skey.signer.key.name).toBe("kt.example.com/receipts/kt/v1");
    expect(parseVkey(out.text().trim())).toEqual(skey.ok ? skey.signer.key : undefined);
    expect(statSync(logFile).mode & 0o777).toBe(0o600);
    // A second run never overwrites a key.
    const before = readFileSync(logFile, "utf8");
    const err = capture();
    expect(await runCli(["kt", "keygen", "--host", "kt.example.com", "--out", logFile], capture(), err)).toBe(
      EXIT.config,
    );
    expect(err.text()).toMatch(/never overwritten/);
    expect(readFileSync(logFile, "utf8")).toBe(before);

    const witnessFile = join(dir, "witness.key");
    const json = capture();
    expect(
      await runCli(
        ["witness", "keygen", "--name", "w1.bank-a.example", "--out", witnessFile, "--json"],
        json,
        capture(),
      ),
    ).toBe(EXIT.ok);
    const printed = JSON.parse(json.text());
    const witness = parseNoteSkey(readFileSync(witnessFile, "utf8"), [COSIGNATURE_ED25519]);
    expect(parseVkey(printed.vkey)).toEqual(witness.ok ? witness.signer.key : undefined);
    expect(printed).toMatchObject({ name: "w1.bank-a.example", privateKeyFile: witnessFile });
    for (const bad of [
      ["kt", "keygen"],
      ["kt", "keygen", "--host", "a b"],
      ["witness", "keygen", "--name", "x"],
      ["witness", "serve"],
    ]) {
      expect(await runCli(bad, capture(), capture()), bad.join(" ")).toBe(EXIT.usage);
    }
  });

  it("runs a witness process that cosigns the service's log and keeps its state across a restart", async () => {
    const build = spawnSync(process.execPath, ["scripts/build-if-stale.mjs"], {
      cwd: ROOT,
      encoding: "utf8",
    });
    expect(build.status, build.stderr).toBe(0);
    const keyFile = join(dir, "w2.key");
    const stateFile = join(dir, "w2.state");
    const out = capture();
    await runCli(["witness", "keygen", "--name", "w2.ngo.example", "--out", keyFile], out, capture());
    const witnessVkey = out.text().trim();
    const rig = ktRig({ clock: new FakeClock(new Date()) });
    const logVkey = rig.runtime.log.vkey;
    const start = async (): Promise<{ child: ChildProcess; url: string }> => {
      const child = spawn(
        process.execPath,
        [
          "dist/src/cli/bin.js",
          "witness",
          "serve",
          "--key",
          keyFile,
          "--state",
          stateFile,
          "--log",
          logVkey,
          "--port",
          "0",
        ],
        { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] },
      );
      const url = await new Promise<string>((resolve, reject) => {
        let text = "";
        child.stdout?.on("data", (chunk) => {
          text += String(chunk);
          const m = /listening on (http:\/\/\S+)\/add-checkpoint/.exec(text);
          if (m !== null) resolve(m[1] as string);
        });
        child.on("exit", (code) => reject(new Error(`witness exited ${code}`)));
      });
      return { child, url };
    };
    const stop = (child: ChildProcess) =>
      new Promise<number | null>((resolve) => {
        child.on("exit", (code) => resolve(code));
        child.kill("SIGTERM");
      });

    let witness = await start();
    const bank = makeIssuer("bank-a");
    rig.keys.add(bank);
    const runtime = rig.instance({
      config: ktConfig({ witnesses: [{ url: witness.url, vkey: witnessVkey }] }),
    });
    const card = testCard();
    await rig.store.ktLog.enqueue([pendingOf(runtime, bank, card, signedBinding(bank, card, userKey()))]);
    await runtime.sequencer.round();
    await runtime.stop();
    const latest = await rig.store.ktLog.latestCheckpoint();
    expect(Object.keys(latest?.cosignatures ?? {})).toEqual(["w2.ngo.example"]);
    expect(await stop(witness.child)).toBe(0);
    const state = JSON.parse(readFileSync(stateFile, "utf8"));
    expect(state["kt.test.example/receipts/kt/v1"]).toEqual({
      size: latest?.size,
      root: base64(latest?.root as Uint8Array),
    });

    // Restarted on its state file, it asks the log to prove it extends what it cosigned.
    witness = await start();
    const again = rig.instance({
      config: ktConfig({ witnesses: [{ url: witness.url, vkey: witnessVkey }] }),
      holder: "second",
    });
    const card2 = testCard();
    await rig.store.ktLog.enqueue([pendingOf(again, bank, card2, signedBinding(bank, card2, userKey()))]);
    rig.clock.advance(11_000);
    await again.sequencer.round();
    await again.stop();
    const newer = await rig.store.ktLog.latestCheckpoint();
    expect(newer?.size).toBeGreaterThan(latest?.size as number);
    expect(Object.keys(newer?.cosignatures ?? {})).toEqual(["w2.ngo.example"]);
    expect(await stop(witness.child)).toBe(0);
  });
});
