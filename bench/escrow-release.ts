import { generateKeyPairSync, randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import {
  AES_KEY_BYTES,
  openSealedReceipt,
  proveAesKey,
  receiptAad,
  type SealedReceipt,
  sealReceipt,
  unwrapAesKey,
  wrapAesKey,
} from "../src/crypto/envelope.js";
import { privateKeyIsConsistent } from "../src/crypto/key-consistency.js";
import { generateRsaKeyPair, parsePrivateKey, parsePublicKey } from "../src/crypto/keys.js";

/**
 * What the escrow-oracle fix costs one release, in this process (one thread, no server): the work a
 * crypto worker does per escrowed receipt, before (RSA-OAEP unwrap with the escrow key, RSA-OAEP wrap
 * to the cardholder's key) and after (the same with the receipt's AAD as OAEP label, plus the AES-GCM
 * pass that proves the key is the receipt's own), for receipts of 1 KiB, 16 KiB and 256 KiB of
 * ciphertext. The two are timed in alternating slices, so that machine load hits both alike; the
 * ratio is after over before. Then the forged-key check a server-side decrypt runs first.
 *
 *   npx tsc -p bench/tsconfig.json && node dist/bench/escrow-release.js [seconds per size, default 6]
 */

const seconds = Number(process.argv[2] ?? 6);
const SLICE_MS = 200;
const ids = { version: "1.0", receiptId: "r-1", merchantId: "m-1", transactionId: "t-1" };
const aad = receiptAad(ids);

interface Side {
  releases: number;
  ms: number;
}

async function main(): Promise<void> {
  const [escrow, user] = await Promise.all([generateRsaKeyPair(), generateRsaKeyPair()]);
  const escrowPrivate = parsePrivateKey(escrow.privateKey);
  const escrowPublic = parsePublicKey(escrow.publicKey).key;
  const userPublic = parsePublicKey(user.publicKey).key;

  const before = (sealed: SealedReceipt) => {
    const key = unwrapAesKey(sealed.encryptedAesKey, escrowPrivate);
    wrapAesKey(key, userPublic);
    key.fill(0);
  };
  const after = (sealed: SealedReceipt) => {
    const key = unwrapAesKey(sealed.encryptedAesKey, escrowPrivate, aad);
    proveAesKey(key, sealed, aad);
    wrapAesKey(key, userPublic);
    key.fill(0);
  };

  console.log(`escrow release per receipt, RSA-2048, ${seconds} s per size, node ${process.version}`);
  for (const size of [1_024, 16_384, 262_144]) {
    const plaintext = randomBytes(size);
    const unbound = sealReceipt(plaintext, aad, escrowPublic);
    const bound = sealReceipt(plaintext, aad, escrowPublic, true);
    if (unwrapAesKey(bound.encryptedAesKey, escrowPrivate, aad).length !== AES_KEY_BYTES) {
      throw new Error("bound wrap did not unwrap");
    }
    const sides: Record<"before" | "after", Side> = {
      before: { releases: 0, ms: 0 },
      after: { releases: 0, ms: 0 },
    };
    const end = performance.now() + seconds * 1000;
    while (performance.now() < end) {
      slice(sides.before, () => before(unbound));
      slice(sides.after, () => after(bound));
    }
    const perRelease = (s: Side) => (s.ms * 1000) / s.releases;
    const [b, a] = [perRelease(sides.before), perRelease(sides.after)];
    // The proof alone, without the RSA work around it: less noisy on a busy machine.
    const key = unwrapAesKey(bound.encryptedAesKey, escrowPrivate, aad);
    const proof: Side = { releases: 0, ms: 0 };
    for (let i = 0; i < 5; i++) slice(proof, () => proveAesKey(key, bound, aad));
    console.log(
      `${String(size / 1024).padStart(4)} KiB: before ${b.toFixed(0)} us, after ${a.toFixed(0)} us ` +
        `(+${(a - b).toFixed(0)} us, ratio ${(a / b).toFixed(3)}; ${sides.before.releases}/${sides.after.releases} runs); ` +
        `the proof alone ${perRelease(proof).toFixed(1)} us`,
    );
  }
}

/**
 * The forged-key check a decrypt now runs before opening (`privateKeyIsConsistent`), per call, against
 * the RSA private operation it guards (`openSealedReceipt` of a 1 KiB receipt).
 */
async function consistencyCost(): Promise<void> {
  const [rsa, ec] = [
    generateKeyPairSync("rsa", { modulusLength: 2048 }),
    generateKeyPairSync("ec", { namedCurve: "P-256" }),
  ];
  const sealed = sealReceipt(randomBytes(1_024), aad, rsa.publicKey);
  const time = (fn: () => unknown) => {
    const side: Side = { releases: 0, ms: 0 };
    const end = performance.now() + 2_000;
    while (performance.now() < end) slice(side, fn);
    return (side.ms * 1000) / side.releases;
  };
  const check = time(() => privateKeyIsConsistent(rsa.privateKey));
  const open = time(() => openSealedReceipt(sealed, aad, rsa.privateKey));
  const checkEc = time(() => privateKeyIsConsistent(ec.privateKey));
  console.log(
    `forged-key check: RSA-2048 ${check.toFixed(0)} us (the open it guards: ${open.toFixed(0)} us), ` +
      `P-256 ${checkEc.toFixed(0)} us`,
  );
}

/** Runs `fn` for one slice, adding its runs and time to `side`. */
function slice(side: Side, fn: () => void): void {
  const start = performance.now();
  const stop = start + SLICE_MS;
  let n = 0;
  let now = start;
  while (now < stop) {
    fn();
    n++;
    now = performance.now();
  }
  side.releases += n;
  side.ms += now - start;
}

await main();
await consistencyCost();
