import { webcrypto } from "node:crypto";
import { parseArgs } from "node:util";
import { Aes256Gcm, CipherSuite, DhkemP256HkdfSha256, HkdfSha256 } from "@hpke/core";
import { importP256Key, importRsaKey } from "../src/client/client-keys.js";
import { type ReceiptJson, sealReceipt } from "../src/client/webcrypto.js";
import { HPKE_INFO_TEXT } from "../src/crypto/suites.js";
import { hashPan, nextId, sizedReceiptText } from "./fixtures.js";

/**
 * `npm run bench:client-seal`: the merchant's side of the zero-knowledge path, in this process with no
 * server: the client library's `sealReceipt` (WebCrypto only, as a merchant's till or browser runs it)
 * against the same primitives called directly ("raw"): JSON of the receipt, a fresh AES-256 key
 * imported into WebCrypto, AES-256-GCM with the receipt's AAD, and the key wrapped with @hpke/core's
 * RFC 9180 seal (P-256, HKDF-SHA256, AES-256-GCM, the same `info` and AAD; for RSA, WebCrypto's
 * RSA-OAEP-256 with the AAD as label). Each side seals a fresh receipt of `--items` line items per call,
 * to a recipient key imported once, one call at a time, in alternating slices; the rate is per
 * CPU-second of this process (WebCrypto runs some work on libuv's threads, so wall-clock rate can exceed
 * one core's): "sealing rate per core".
 *
 *   npm run bench:client-seal [-- --items 2,12,50 --seconds 3 --rounds 4]
 */

const { values: args } = parseArgs({
  options: {
    items: { type: "string", default: "2,12,50" },
    seconds: { type: "string", default: "3" },
    rounds: { type: "string", default: "4" },
  },
});

const subtle = webcrypto.subtle;
const INFO = new TextEncoder().encode(HPKE_INFO_TEXT);
const hpke = new CipherSuite({
  kem: new DhkemP256HkdfSha256(),
  kdf: new HkdfSha256(),
  aead: new Aes256Gcm(),
});

type Seal = (receipt: ReceiptJson) => Promise<unknown>;

/** A fresh receipt of `items` line items (fresh ids), as a merchant hands it to sealReceipt. */
function receiptOf(items: number): () => ReceiptJson {
  const template = JSON.parse(sizedReceiptText(hashPan("bench-client-seal"), items)) as Record<
    string,
    unknown
  >;
  delete template.recipientHashedPan;
  return () => {
    const id = nextId();
    return { ...template, receiptId: `r-${id}`, transactionId: `t-${id}` } as unknown as ReceiptJson;
  };
}

function aadOf(r: Record<string, unknown>): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(
    `${r.version ?? "1.0"}\n${r.receiptId}\n${r.merchantId}\n${r.transactionId}`,
  );
}

/** The raw side: the primitives sealReceipt uses, called directly, the key wrapped by `wrap`. */
function rawSeal(
  wrap: (aesKey: Uint8Array<ArrayBuffer>, aad: Uint8Array<ArrayBuffer>) => Promise<unknown>,
): Seal {
  return async (receipt) => {
    const plain = { version: "1.0", ...(receipt as unknown as Record<string, unknown>) };
    const aad = aadOf(plain);
    const rawKey = webcrypto.getRandomValues(new Uint8Array(32));
    const aesKey = await subtle.importKey("raw", rawKey, { name: "AES-GCM" }, false, ["encrypt"]);
    const iv = webcrypto.getRandomValues(new Uint8Array(12));
    const sealed = new Uint8Array(
      await subtle.encrypt(
        { name: "AES-GCM", iv, additionalData: aad, tagLength: 128 },
        aesKey,
        new TextEncoder().encode(JSON.stringify(plain)),
      ),
    );
    const wrapped = await wrap(rawKey, aad);
    return { sealed, iv, wrapped };
  };
}

/** Seals for `seconds`, one call at a time; returns calls and CPU seconds of this process. */
async function sealFor(seal: Seal, next: () => ReceiptJson, seconds: number) {
  const cpu0 = process.cpuUsage();
  const deadline = performance.now() + seconds * 1000;
  let calls = 0;
  while (performance.now() < deadline) {
    await seal(next());
    calls++;
  }
  const cpu = process.cpuUsage(cpu0);
  return { calls, cpuSeconds: (cpu.user + cpu.system) / 1e6 };
}

async function compare(name: string, sides: [Seal, Seal], next: () => ReceiptJson) {
  const seconds = Number(args.seconds) / Number(args.rounds);
  for (const s of sides) await sealFor(s, next, 0.5);
  const totals = sides.map(() => ({ calls: 0, cpuSeconds: 0 }));
  for (let round = 0; round < Number(args.rounds); round++) {
    for (const [i, s] of sides.entries()) {
      const r = await sealFor(s, next, seconds);
      const t = totals[i] as { calls: number; cpuSeconds: number };
      t.calls += r.calls;
      t.cpuSeconds += r.cpuSeconds;
    }
  }
  const [lib, raw] = totals.map((t) => t.calls / t.cpuSeconds) as [number, number];
  process.stdout.write(
    `${name}: sealReceipt ${lib.toFixed(0)} per CPU-second, raw ${raw.toFixed(0)} -> ${Math.round((lib / raw) * 100)}%\n`,
  );
}

async function main() {
  const p256 = (await subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, true, [
    "deriveBits",
  ])) as webcrypto.CryptoKeyPair;
  const p256Spki = Buffer.from(await subtle.exportKey("spki", p256.publicKey)).toString("base64");
  const p256Key = await importP256Key(p256Spki, "public");
  const rsa = (await subtle.generateKey(
    { name: "RSA-OAEP", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" },
    true,
    ["encrypt", "decrypt"],
  )) as webcrypto.CryptoKeyPair;
  const rsaSpki = Buffer.from(await subtle.exportKey("spki", rsa.publicKey)).toString("base64");
  const rsaKey = await importRsaKey(rsaSpki, "public");
  process.stdout.write(`Node ${process.version}; one call at a time; rate per CPU-second of the process\n`);
  for (const items of String(args.items).split(",").map(Number)) {
    const next = receiptOf(items);
    await compare(
      `P-256 HPKE, ${items} items`,
      [
        (r) => sealReceipt(r, p256Key, { keyId: "k1" }),
        rawSeal((key, aad) => hpke.seal({ recipientPublicKey: p256Key, info: INFO }, key, aad)),
      ],
      next,
    );
    await compare(
      `RSA-OAEP-256, ${items} items`,
      [
        (r) => sealReceipt(r, rsaKey, { keyId: "k1", aadBound: true }),
        rawSeal((key, aad) => subtle.encrypt({ name: "RSA-OAEP", label: aad }, rsaKey, key)),
      ],
      next,
    );
  }
}

await main();
