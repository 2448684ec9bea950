import { createHmac, generateKeyPairSync, randomBytes, randomUUID, sign } from "node:crypto";
import { buildApp } from "../src/app.js";
import { systemClock } from "../src/clock.js";
import { loadConfig } from "../src/config.js";
import { createApiKey } from "../src/domain/api-keys.js";
import { ktAnswerFields } from "../src/domain/kt/answers.js";
import type { KtSigningKeyInfo } from "../src/domain/kt/statement-check.js";
import { base64, base64url, utf8 } from "../src/kt/bytes.js";
import { canonicalJson } from "../src/kt/json.js";
import { nodeSha256 } from "../src/kt/node-engine.js";
import { NOTE_ED25519 } from "../src/kt/note.js";
import { formatNoteSkey, generateNoteSigner } from "../src/kt/note-keys.js";
import { signingKeyIdOf } from "../src/kt/signatures.js";
import { formatTime, parseStatement, type Statement } from "../src/kt/statements.js";
import { createLogger } from "../src/logging.js";
import { createMemoryStore } from "../src/store/memory/index.js";
import { compare } from "./kt-world.js";

/**
 * What the key directory's proofs cost a look-up (`npm run bench:kt-answers`): one service in this
 * process (memory store, its sequencer, no witnesses), a log of `LEAVES` statements, and REST look-ups
 * over a kept-alive socket of a card whose key has a logged binding (the answer carries binding,
 * opening, the leaf's and the snapshot's proofs and the checkpoint) against a card registered without
 * one (the answer as before), interleaved, per CPU-second of the whole process (client and server).
 * Then `register` of a fresh card with the issuer's signed binding (it answers once the leaf is under a
 * checkpoint, with its proofs) against a plain `register`, the same way, and the latency of each
 * (the wait for the sequencer's round is time, not CPU: both figures are printed).
 */

const PEPPER = "bench-pepper-bench-pepper-bench-pepper";
const ORIGIN = "bench.example/receipts/kt/v1";
const LEAVES = Number(process.env.KT_BENCH_LEAVES ?? 100_000);
const BIN = "41111111";
const ADMIN = randomBytes(32).toString("base64url");

function issuer() {
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  const spki = new Uint8Array(publicKey.export({ format: "der", type: "spki" }));
  const info: KtSigningKeyInfo = {
    tenantId: "bank-a",
    signingKeyId: signingKeyIdOf(spki),
    spki,
    role: "root",
    status: "current",
  };
  return { info, sign: (data: Uint8Array) => new Uint8Array(sign(null, data, privateKey)) };
}

function deviceKey() {
  const spki = new Uint8Array(
    generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey.export({ format: "der", type: "spki" }),
  );
  return { keyId: randomUUID(), spki, spkiSha256: base64url(nodeSha256(spki)) };
}

/** A signed binding of `key` to the card, parsed, as the intake takes it. */
function binding(signer: ReturnType<typeof issuer>, hashedPan: string, key = deviceKey()) {
  const now = Date.now();
  const text = canonicalJson({
    v: 1,
    type: "receipts.v1/key-binding",
    issuer: "bank-a",
    cardRef: hashedPan,
    bin: BIN,
    keyId: key.keyId,
    algorithm: "HPKE-P256-SHA256-A256GCM",
    spkiSha256: key.spkiSha256,
    version: 1,
    supersedes: null,
    notBefore: formatTime(now - 86_400_000),
    notAfter: formatTime(now + 30 * 86_400_000),
  });
  const parsed = parseStatement(text);
  if (!parsed.ok) throw new Error(parsed.reason);
  const bytes = utf8(text);
  return { key, statement: parsed.value as Statement, bytes, signature: signer.sign(bytes) };
}

const signer = issuer();
const store = createMemoryStore();
await store.init();
const config = loadConfig({
  RECEIPTS_ENV: "dev",
  LOG_LEVEL: "silent",
  HASHED_PAN_PEPPER: PEPPER,
  KT_LOG_PRIVATE_KEY: formatNoteSkey(generateNoteSigner(ORIGIN, NOTE_ED25519)),
  KT_SEQUENCER_POLL_MS: "20",
  RATE_LIMIT_TIERS: JSON.stringify({ enterprise: { requestsPerMinute: 100_000_000 } }),
  ADMIN_TOKEN: ADMIN,
});
const app = await buildApp({
  config,
  store,
  logger: createLogger("silent"),
  clock: systemClock,
  workers: 1,
  kt: {
    signingKeys: {
      find: async (_t, id) => (id === signer.info.signingKeyId ? signer.info : undefined),
    },
  },
});
const address = await app.server.listen(0, "127.0.0.1");
const base = `http://127.0.0.1:${address.port}`;
const issuerKey = (
  await createApiKey(store, "dev", { role: "issuer", tier: "enterprise", tenantId: "bank-a" }, new Date())
).key;
const merchantKey = (
  await createApiKey(store, "dev", { role: "merchant", tier: "enterprise", tenantId: "m" }, new Date())
).key;

async function call(path: string, key: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`${base}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": key },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as { data?: Record<string, unknown>; error?: unknown };
  if (res.status !== 200) throw new Error(`${path}: ${res.status} ${JSON.stringify(json.error)}`);
  return json.data ?? {};
}

// The log: LEAVES bindings of other cards, appended by the sequencer in rounds.
const kt = app.domain.kt;
for (let done = 0; done < LEAVES; ) {
  const batch = Array.from({ length: Math.min(2_000, LEAVES - done) }, () => {
    const hashedPan = randomBytes(32).toString("hex");
    const signed = binding(signer, hashedPan);
    return kt.pendingStatement({
      tenantId: "bank-a",
      statement: signed.statement,
      bytes: signed.bytes,
      signature: signed.signature,
      signingKeyId: signer.info.signingKeyId,
      card: {
        kind: "hashed-pan",
        ref: hashedPan,
        key: createHmac("sha256", PEPPER).update(hashedPan).digest("hex"),
      },
    });
  });
  await store.ktLog.enqueue(batch);
  done += batch.length;
  while ((await store.ktLog.pending(1)).length > 0) await app.kt.sequencer.round();
}

// Two registered cards: one whose binding the log holds, one without.
async function registerCard(bound: boolean): Promise<string> {
  const hashedPan = randomBytes(32).toString("hex");
  const key = deviceKey();
  await call("/api/v1/onboarding/register", issuerKey, {
    hashedPan,
    publicKey: base64(key.spki),
    keyId: key.keyId,
    cardBin: BIN,
  });
  if (bound) {
    const signed = binding(signer, hashedPan, key);
    const pending = kt.pendingStatement({
      tenantId: "bank-a",
      statement: signed.statement,
      bytes: signed.bytes,
      signature: signed.signature,
      signingKeyId: signer.info.signingKeyId,
      card: {
        kind: "hashed-pan",
        ref: hashedPan,
        key: createHmac("sha256", PEPPER).update(hashedPan).digest("hex"),
      },
    });
    await store.ktLog.enqueue([pending]);
    kt.notify();
    await kt.waitForLeaf(pending.id);
  }
  return hashedPan;
}
const plainCard = await registerCard(false);
const boundCard = await registerCard(true);
const lookup = (hashedPan: string) => () =>
  call("/api/v1/keys/lookup", merchantKey, { recipientHashedPan: hashedPan, cardBin: BIN }).then(() => 1);
const answer = await call("/api/v1/keys/lookup", merchantKey, {
  recipientHashedPan: boundCard,
  cardBin: BIN,
});
if (answer.proof === undefined) throw new Error("the bound card's answer carries no proof");
const size = (await store.ktLog.head()).size;
// Several interleaved comparisons, so the spread shows beside the ratio (KT_BENCH_REPEAT, default 3).
const ratios: number[] = [];
for (let i = 0; i < Number(process.env.KT_BENCH_REPEAT ?? 3); i++) {
  const [plain, proven] = await compare(`REST look-up at ${size.toLocaleString("en")} leaves`, [
    ["plain (key without a logged binding)", lookup(plainCard)],
    ["with binding and proofs", lookup(boundCard)],
  ]);
  ratios.push((proven as number) / (plain as number));
}
console.log(
  `  answer bytes: plain ${JSON.stringify(await call("/api/v1/keys/lookup", merchantKey, { recipientHashedPan: plainCard, cardBin: BIN })).length}, with proofs ${JSON.stringify(answer).length}`,
);
console.log(`  ratio with proofs / plain: ${ratios.map((r) => r.toFixed(3)).join(", ")}`);
// The key directory's part of one answer alone (no HTTP, no encoding): what the caches of proofs,
// note and statement save shows here without the noise of the whole request.
const subject = {
  kind: "card" as const,
  cardKey: createHmac("sha256", PEPPER).update(boundCard).digest("hex"),
  cardRef: boundCard,
  keyId: String(answer.keyId),
};
if ((await ktAnswerFields({ kt, store }, subject)).proof === undefined)
  throw new Error("no proof for the subject");
const [fieldsRate] = await compare("the key directory's members of one look-up answer, in process", [
  ["ktAnswerFields", () => ktAnswerFields({ kt, store }, subject).then(() => 1)],
]);
console.log(`  ${(1e6 / (fieldsRate as number)).toFixed(1)} us of CPU per answer`);
if (process.env.KT_BENCH_LOOKUPS_ONLY === "1") {
  await app.close();
  process.exit(0);
}

// register: the issuer's root in the store (the intake checks bindings against the tenant's keys).
await call("/api/v1/issuers/signing-keys", issuerKey, { publicKey: base64(signer.info.spki) });
const confirmed = await fetch(
  `${base}/admin/v1/issuers/bank-a/signing-keys/${signer.info.signingKeyId}/confirm`,
  { method: "POST", headers: { authorization: `Bearer ${ADMIN}` } },
);
if (confirmed.status !== 200) throw new Error(`confirm: ${confirmed.status}`);
/** Registers a fresh card's fresh device key, with its signed binding when `bound`; resolves with 1. */
async function registerOnce(bound: boolean): Promise<number> {
  const hashedPan = randomBytes(32).toString("hex");
  const key = deviceKey();
  const request: Record<string, unknown> = {
    hashedPan,
    publicKey: base64(key.spki),
    keyId: key.keyId,
    cardBin: BIN,
  };
  if (bound) {
    const signed = binding(signer, hashedPan, key);
    request.binding = {
      statement: base64(signed.bytes),
      signature: base64(signed.signature),
      signingKeyId: signer.info.signingKeyId,
    };
  }
  const data = await call("/api/v1/onboarding/register", issuerKey, request);
  if (bound && data.proof === undefined) throw new Error("register with a binding answered no proof");
  return 1;
}
const [plainRegister, boundRegister] = await compare(
  "REST register of a fresh card (per CPU-second)",
  [
    ["plain register", () => registerOnce(false)],
    ["with a signed binding (answers once its leaf is under a checkpoint)", () => registerOnce(true)],
  ],
  8,
);
console.log(
  `  ratio with binding / plain: ${((boundRegister as number) / (plainRegister as number)).toFixed(3)}`,
);
/** Median wall time of `n` calls, one at a time, ms. */
async function medianMs(run: () => Promise<number>, n: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const start = performance.now();
    await run();
    times.push(performance.now() - start);
  }
  return times.sort((a, b) => a - b)[Math.floor(n / 2)] as number;
}
const plainMs = await medianMs(() => registerOnce(false), 100);
const boundMs = await medianMs(() => registerOnce(true), 100);
console.log(
  `  latency (median of 100, one at a time): plain ${plainMs.toFixed(2)} ms, with binding ${boundMs.toFixed(2)} ms (${(boundMs / plainMs).toFixed(2)}x)`,
);
await app.close();
