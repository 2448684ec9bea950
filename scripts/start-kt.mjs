// `npm run start:kt`: the service as `npm start` runs it (development, in-memory store), with a key log
// that merchants can verify: the log's own signing key, three witnesses of two organisations run in
// this process on 127.0.0.1, and the operator API on. Writes the merchant's trust policy (the log's
// vkey, the witnesses' vkeys, quorum 2) to kt-policy.json in a new temporary folder and prints its path
// and the operator token, then hands the terminal to the service. For trying the careful issuer's path
// of the README; a deployment runs witnesses of other organisations (docs/key-transparency.md).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const load = (path) => import(new URL(`../dist/src/${path}`, import.meta.url).href);
const { formatNoteSkey, generateNoteSigner } = await load("kt/note-keys.js");
const { COSIGNATURE_ED25519, formatVkey, NOTE_ED25519 } = await load("kt/note.js");
const { startWitnessServer } = await load("cli/witness-server.js");

const dir = mkdtempSync(join(tmpdir(), "receipts-kt-"));
const origin = "localhost/receipts/kt/v1";
const log = generateNoteSigner(origin, NOTE_ED25519);
const witnesses = [];
for (const [name, organisation] of [
  ["w1.bank-a.example", "bank-a"],
  ["w2.bank-b.example", "bank-b"],
  ["w3.ngo.example", "ngo"],
]) {
  const signer = generateNoteSigner(name, COSIGNATURE_ED25519);
  const running = await startWitnessServer({
    config: { signers: [signer], logs: { [origin]: [log.key] } },
    statePath: join(dir, `${name}.state`),
    port: 0,
  });
  witnesses.push({ url: running.url, vkey: formatVkey(signer.key), organisation });
}
const policy = join(dir, "kt-policy.json");
writeFileSync(
  policy,
  `${JSON.stringify(
    {
      origin,
      logKey: formatVkey(log.key),
      operator: "receipts-operator",
      witnesses: witnesses.map(({ vkey, organisation }) => ({ vkey, organisation })),
      quorum: 2,
      maxCheckpointAgeSeconds: 3600,
      // A development service: its roots count at once (KT_ROOT_DELAY 0).
      rootDelaySeconds: 0,
    },
    null,
    2,
  )}\n`,
);
const admin = process.env.ADMIN_TOKEN || randomBytes(32).toString("base64url");
process.stdout.write(`Key log with 3 local witnesses. For the README's careful issuer's path:\n`);
process.stdout.write(`  ADMIN=${admin}\n  POLICY=${policy}\n`);
const service = spawn(process.execPath, ["--max-semi-space-size=64", join(root, "dist", "src", "main.js")], {
  stdio: "inherit",
  env: {
    ...process.env,
    ADMIN_TOKEN: admin,
    KT_LOG_PRIVATE_KEY: formatNoteSkey(log),
    WITNESS_URLS: witnesses.map((w) => `${w.url} ${w.vkey}`).join(","),
  },
});
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => service.kill(signal));
service.on("exit", (code) => process.exit(code ?? 1));
