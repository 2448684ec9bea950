import { createHash, generateKeyPairSync, randomBytes, randomUUID } from "node:crypto";
import { buildApp } from "../src/app.js";
import {
  generateIssuerSigner,
  type IssuerSigner,
  keyBindingStatement,
  signStatement,
} from "../src/client/key-binding.js";
import { systemClock } from "../src/clock.js";
import { loadConfig } from "../src/config.js";
import { createApiKey } from "../src/domain/api-keys.js";
import { panHashOf } from "../src/domain/pan.js";
import { fromBase64Strict } from "../src/kt/bytes.js";
import { parseStatement } from "../src/kt/statements.js";
import { createLogger } from "../src/logging.js";
import { createMemoryStore } from "../src/store/memory/index.js";
import { compare } from "./kt-world.js";

/**
 * What server-side sealing's check costs encrypt (`npm run bench:kt-seal`): one service in this
 * process (memory store, its sequencer, no witnesses), a log of `LEAVES` bindings, and REST encrypts
 * over a kept-alive socket for a card of an issuer with `requireBindings` (each seal verifies the
 * card's key against the latest checkpoint and snapshot, `src/domain/kt/seal-check.ts`) against a card
 * of an issuer without it (sealed as before), interleaved, per CPU-second of the whole process
 * (client, server and the sealing workers).
 */

const PEPPER = "bench-pepper-bench-pepper-bench-pepper";
const TOKEN = "bench-admin-token-bench-admin-token-0123";
const LEAVES = Number(process.env.KT_BENCH_LEAVES ?? 10_000);

const store = createMemoryStore();
await store.init();
const config = loadConfig({
  RECEIPTS_ENV: "dev",
  LOG_LEVEL: "silent",
  ADMIN_TOKEN: TOKEN,
  HASHED_PAN_PEPPER: PEPPER,
  KT_SEQUENCER_POLL_MS: "20",
  RATE_LIMIT_TIERS: JSON.stringify({ enterprise: { requestsPerMinute: 100_000_000 } }),
});
const app = await buildApp({ config, store, logger: createLogger("silent"), clock: systemClock, workers: 1 });
const address = await app.server.listen(0, "127.0.0.1");
const base = `http://127.0.0.1:${address.port}`;
const apiKey = async (role: "issuer" | "merchant", tenantId: string) =>
  (await createApiKey(store, "dev", { role, tier: "enterprise", tenantId }, new Date())).key;
const merchantKey = await apiKey("merchant", "m");

async function call(
  path: string,
  key: string,
  body: unknown,
  method = "POST",
): Promise<Record<string, unknown>> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      "content-type": "application/json",
      ...(key === TOKEN ? { authorization: `Bearer ${TOKEN}` } : { "x-api-key": key }),
    },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as { data?: Record<string, unknown>; error?: unknown };
  if (res.status !== 200) throw new Error(`${path}: ${res.status} ${JSON.stringify(json.error)}`);
  return json.data ?? {};
}

interface Issuer {
  tenant: string;
  key: string;
  bin: string;
  root?: IssuerSigner;
}

/** An issuer owning `bin`; with `strict`, requireBindings and a confirmed root. */
async function issuer(tenant: string, bin: string, strict: boolean): Promise<Issuer> {
  const bank: Issuer = { tenant, bin, key: await apiKey("issuer", tenant) };
  const change = app.domain.kt.pendingDirectoryChange("bins.set", tenant);
  await store.bins.set(tenant, [bin], new Date(), [change]);
  if (!strict) return bank;
  await call(`/admin/v1/issuers/${tenant}/require-bindings`, TOKEN, { requireBindings: true }, "PUT");
  const root = await generateIssuerSigner("Ed25519");
  await call("/api/v1/issuers/signing-keys", bank.key, { publicKey: root.spki });
  await call(`/admin/v1/issuers/${tenant}/signing-keys/${root.signingKeyId}/confirm`, TOKEN, {});
  bank.root = root;
  return bank;
}

function deviceKey(): { keyId: string; publicKey: string } {
  const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return {
    keyId: randomUUID(),
    publicKey: publicKey.export({ type: "spki", format: "der" }).toString("base64"),
  };
}

async function bindingOf(bank: Issuer, hashedPan: string, key: { keyId: string; publicKey: string }) {
  const statement = keyBindingStatement({
    issuer: bank.tenant,
    card: { hashedPan },
    bin: bank.bin,
    ...key,
    version: 1,
  });
  return signStatement(statement, bank.root as IssuerSigner);
}

/** The log: LEAVES bindings of other cards of the strict issuer, appended by the sequencer in rounds. */
async function fillLog(bank: Issuer): Promise<void> {
  const kt = app.domain.kt;
  for (let done = 0; done < LEAVES; ) {
    const batch = [];
    for (let i = 0; i < Math.min(1_000, LEAVES - done); i++) {
      const hashedPan = randomBytes(32).toString("hex");
      const signed = await bindingOf(bank, hashedPan, deviceKey());
      const bytes = fromBase64Strict(signed.statement) as Uint8Array;
      const parsed = parseStatement(bytes);
      if (!parsed.ok) throw new Error(parsed.reason);
      batch.push(
        kt.pendingStatement({
          tenantId: bank.tenant,
          statement: parsed.value,
          bytes,
          signature: fromBase64Strict(signed.signature) as Uint8Array,
          signingKeyId: signed.signingKeyId,
          card: { kind: "hashed-pan", ref: hashedPan, key: panHashOf(PEPPER, hashedPan) },
        }),
      );
    }
    await store.ktLog.enqueue(batch);
    done += batch.length;
    while ((await store.ktLog.pending(1)).length > 0) await app.kt.sequencer.round();
  }
}

async function registerCard(bank: Issuer): Promise<string> {
  const hashedPan = createHash("sha256").update(randomBytes(16)).digest("hex");
  const key = deviceKey();
  const binding = bank.root === undefined ? undefined : await bindingOf(bank, hashedPan, key);
  await call("/api/v1/onboarding/register", bank.key, {
    hashedPan,
    ...key,
    cardBin: bank.bin,
    ...(binding === undefined ? {} : { binding }),
  });
  return hashedPan;
}

const strict = await issuer("bank-strict", "41111111", true);
const lax = await issuer("bank-lax", "42222222", false);
await fillLog(strict);
const strictCard = await registerCard(strict);
const laxCard = await registerCard(lax);
while ((await store.ktLog.pending(1)).length > 0) await app.kt.sequencer.round();

let n = 0;
const encrypt = (hashedPan: string, cardBin: string) => () =>
  call("/api/v1/receipts/encrypt", merchantKey, {
    receiptId: `r-${++n}`,
    merchantId: "merchant-001",
    merchantName: "Corner Coffee",
    transactionId: `t-${n}`,
    transactionDate: "2026-01-01T09:30:00Z",
    currency: "eur",
    recipientHashedPan: hashedPan,
    cardBin,
    items: [{ lineItemId: "li-1", name: "Flat white", quantity: 2, unitPrice: 350, totalPrice: 700 }],
    totalAmount: 700,
  }).then(() => 1);
// Both seal before measuring: the strict card's key verifies (else the bench would measure refusals).
await encrypt(strictCard, strict.bin)();
await encrypt(laxCard, lax.bin)();
const size = (await store.ktLog.head()).size;
const [plain, checked] = await compare(`REST encrypt at ${size.toLocaleString("en")} leaves`, [
  ["issuer without requireBindings (sealed as before)", encrypt(laxCard, lax.bin)],
  ["issuer with requireBindings (key verified against the log)", encrypt(strictCard, strict.bin)],
]);
console.log(
  `  ratio with requireBindings / without: ${((checked as number) / (plain as number)).toFixed(3)}`,
);
await app.close();
