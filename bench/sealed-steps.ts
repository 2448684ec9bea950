import { createHash, generateKeyPairSync, randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { create } from "@bufbuild/protobuf";
import {
  type StoreSealedReceiptRequest,
  StoreSealedReceiptRequestSchema,
} from "../gen/receipts/v1/receipts_pb.js";
import { buildApp } from "../src/app.js";
import { base64OfBytes } from "../src/base64-text.js";
import { loadConfig } from "../src/config.js";
import { isKeyAlgorithm } from "../src/crypto/suites.js";
import { createDevKeys } from "../src/dev-keys.js";
import type { DomainDeps } from "../src/domain/deps.js";
import { receiptEvents } from "../src/domain/events.js";
import { checkKeyBundle, checkSealedBytes } from "../src/domain/key-bundles.js";
import { assertMerchantIdUsable, claimMerchantId } from "../src/domain/merchants.js";
import { register } from "../src/domain/onboarding.js";
import { checkReceiptIdentity } from "../src/domain/receipt-rules.js";
import { storeSealedReceipt } from "../src/domain/receipts.js";
import { checkCardRef, recipientOf } from "../src/domain/routing.js";
import { receiptRecordOf, settleStoredReceipt } from "../src/domain/sealing.js";
import { Violations } from "../src/errors.js";
import { createLogger } from "../src/logging.js";
import { encryptedReceiptWith } from "../src/rpc/convert.js";
import { createStore } from "../src/store/index.js";
import { openStore } from "../src/store/startup.js";
import type { ApiKeyRecord } from "../src/store/types.js";
import { sealedAnswer, setUpZkFloor } from "./zk-floor.js";

/**
 * The sealed-receipt write path in one process, free of HTTP and the load generator: main-thread CPU
 * per call (`process.cpuUsage`, the event worker's turns included) of
 *
 * - `bare`: bench/zk-floor.ts's gRPC route on a decoded message (`sealedAnswer`: its checks, the card's
 *   HMAC, its map, the answer message);
 * - `service`: what the gRPC service does between decode and encode (`storeSealedReceipt` and the
 *   answer literal), on the memory store with one registered RSA card, as the service runs;
 * - `steps-1` .. `steps-10`: the same call cut after its first 1..10 steps (below), written out here
 *   step by step as `prepareSealed` and `storeReceipt` run them: the difference between two
 *   neighbours is what one step costs (ablation; keep `STEPS` in line with src/domain/sealed.ts and
 *   src/domain/receipts.ts when they change); `steps-7+` is step 8 stored without its event (no
 *   call the service makes), which splits the store's indexes from the event's outbox and worker.
 *
 * Each variant runs `--calls` calls with fresh ids (the envelope's random bytes the sizes the wrk
 * bench sends at 2 items), in `--rounds` alternating rounds after one warm-up round; the stored
 * receipts are deleted between rounds so the heap does not grow across them. Prints the fastest and
 * the median round of each, in us per call.
 *
 *   node dist/bench/sealed-steps.js [--calls 20000] [--rounds 4] [--only bare,service,steps-8]
 */

const STEPS = [
  "checks (ids, card, sizes, bundle)",
  "merchantId usable (owner read)",
  "recipient (card HMAC, user, key)",
  "key bundle checked",
  "record built (base64 parts, id)",
  "merchantId claimed (owner read)",
  "events built",
  "stored (indexes, outbox)",
  "key re-read (erasure race)",
  "answer built",
] as const;

const { values: args } = parseArgs({
  options: {
    calls: { type: "string", default: "20000" },
    rounds: { type: "string", default: "4" },
    ciphertext: { type: "string", default: "600" },
    only: { type: "string" },
  },
});

const caller = { requestId: "req-bench", sourceIp: "127.0.0.1" };

/** The service's call cut after `last` steps (1..10), as `prepareSealed` and `storeReceipt` run them. */
async function steps(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  req: StoreSealedReceiptRequest,
  last: number,
) {
  const input = { ...req, recipientHashedPan: req.recipientHashedPan.toLowerCase() };
  const v = new Violations();
  const identity = checkReceiptIdentity(v, input, "");
  checkCardRef(input, v);
  checkSealedBytes(v, input, "");
  const bundle = input.keyBundle;
  if (bundle === undefined || bundle.keyId === "" || !isKeyAlgorithm(bundle.algorithm))
    v.add("keyBundle", "bad");
  v.throwIfAny();
  if (last < 2) return;
  await assertMerchantIdUsable(deps, principal, identity.merchantId);
  if (last < 3) return;
  const recipient = await recipientOf(deps, input);
  if (last < 4) return;
  if (bundle?.keyId !== recipient.key.keyId) throw new Error("conflict");
  const keyBundle = checkKeyBundle(v, "keyBundle", bundle, recipient.key);
  v.throwIfAny();
  if (last < 5 || keyBundle === undefined) return;
  const parts = { ciphertext: input.ciphertext, iv: input.iv, authTag: input.authTag };
  const record = receiptRecordOf(deps, principal, recipient, identity, {
    keyBundle,
    ciphertext: base64OfBytes(parts.ciphertext),
    iv: base64OfBytes(parts.iv),
    authTag: base64OfBytes(parts.authTag),
  });
  if (last < 6) return;
  await claimMerchantId(deps, principal, input.merchantId);
  if (last < 7) return;
  const events = receiptEvents(deps, record);
  if (last === 7.5) await deps.store.receipts.insert(record, []);
  if (last < 8) return;
  if (!(await deps.store.receipts.insert(record, events))) throw new Error("stored twice");
  if (last < 9) return;
  await settleStoredReceipt(deps, record);
  if (last < 10) return;
  return { $typeName: "receipts.v1.StoreSealedReceiptResponse", receipt: encryptedReceiptWith(record, req) };
}

/** The service as its gRPC method runs it: the domain call and the answer literal. */
async function service(deps: DomainDeps, principal: ApiKeyRecord, req: StoreSealedReceiptRequest) {
  const input = { ...req, recipientHashedPan: req.recipientHashedPan.toLowerCase() };
  const record = await storeSealedReceipt(deps, principal, input, caller);
  return { $typeName: "receipts.v1.StoreSealedReceiptResponse", receipt: encryptedReceiptWith(record, req) };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

/** CPU us per call of `call` over `requests`, yielding a turn every 64 calls (the event worker runs then). */
async function cpuPerCall(
  requests: StoreSealedReceiptRequest[],
  call: (r: StoreSealedReceiptRequest) => unknown,
) {
  await turn();
  const start = process.cpuUsage();
  for (let i = 0; i < requests.length; i++) {
    await call(requests[i] as StoreSealedReceiptRequest);
    if ((i & 63) === 63) await turn();
  }
  // The worker's last batch (it gathers for 5 ms).
  await new Promise((resolve) => setTimeout(resolve, 12));
  const used = process.cpuUsage(start);
  return (used.user + used.system) / requests.length;
}

async function main(): Promise<void> {
  Object.assign(process.env, {
    RECEIPTS_ENV: "dev",
    STORE: "memory",
    LOG_LEVEL: "warn",
    RATE_LIMIT_TIERS: '{"standard":{"requestsPerMinute":1000000000,"generateKeysPerMinute":1000000000}}',
  });
  const config = loadConfig();
  const logger = createLogger("warn");
  const store = await openStore(await createStore(config, logger), { logger });
  await createDevKeys(store, new Date());
  const app = await buildApp({ config, store, logger });
  const deps = app.domain;
  const [merchant] = await store.apiKeys.list("dev-merchant");
  const [issuer] = await store.apiKeys.list("dev-issuer");
  if (merchant === undefined || issuer === undefined) throw new Error("no dev keys");
  const spki = generateKeyPairSync("rsa", { modulusLength: 2048 })
    .publicKey.export({ type: "spki", format: "der" })
    .toString("base64");
  const hashedPan = createHash("sha256").update("4111111111111111").digest("hex");
  const keyId = "3f1c7a52-8e0b-4d3a-9c1e-2b7f6a9d0e41";
  const { userId } = await register(deps, issuer, { hashedPan, publicKey: spki, keyId });
  setUpZkFloor("bench-key", [{ hashedPan, keyId, spki }]);

  const envelope = {
    ciphertext: randomBytes(Number(args.ciphertext)),
    iv: randomBytes(12),
    authTag: randomBytes(16),
    keyBundle: { keyId, algorithm: "RSA-OAEP-256", encryptedAesKey: randomBytes(256) },
  };
  let n = 0;
  const request = () => {
    n++;
    return create(StoreSealedReceiptRequestSchema, {
      ...envelope,
      recipientHashedPan: hashedPan,
      version: "1.0",
      receiptId: `r-${n}`,
      merchantId: "m-bench",
      transactionId: `t-${n}`,
    });
  };
  const variants: Record<string, (r: StoreSealedReceiptRequest) => unknown> = {
    bare: (r) => {
      const answer = sealedAnswer(merchant, r);
      if ("status" in answer) throw new Error(`the bare route refused: ${answer.message}`);
    },
    service: (r) => service(deps, merchant, r),
  };
  STEPS.forEach((_, i) => {
    variants[`steps-${i + 1}`] = (r) => steps(deps, merchant, r, i + 1);
  });
  // Step 8 without its events (not a call the service makes): the store's part of step 8 alone.
  variants["steps-7+"] = (r) => steps(deps, merchant, r, 7.5);
  const names = args.only === undefined ? Object.keys(variants) : args.only.split(",");
  const calls = Number(args.calls);
  const results = new Map<string, number[]>(names.map((name) => [name, []]));
  for (let round = 0; round <= Number(args.rounds); round++) {
    for (const name of names) {
      const call = variants[name];
      if (call === undefined) throw new Error(`no variant ${name}`);
      const us = await cpuPerCall(Array.from({ length: calls }, request), call);
      if (round > 0) results.get(name)?.push(us);
    }
    const user = await store.users.findById(userId);
    if (user === undefined) throw new Error("the user is gone");
    while ((await store.receipts.deleteByUser({ userId, panHash: user.panHash }, 1_000)) > 0) {}
  }
  for (const [name, rounds] of results) {
    const sorted = [...rounds].sort((a, b) => a - b);
    const step = /^steps-\d+$/.test(name) ? ` (${STEPS[Number(name.slice(6)) - 1]})` : "";
    const median = sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
    console.log(
      `${name.padEnd(9)} fastest ${(sorted[0] ?? Number.NaN).toFixed(1)} median ${median.toFixed(1)} us${step}`,
    );
  }
  await app.close();
}

await main();
