import {
  importP256Key,
  importRsaKey,
  openReceipt,
  type PrivateKeyInput,
  type ReceiptEnvelope,
} from "../src/client/webcrypto.js";
import { type ApiKeys, type KeyAlgorithm, listerWith, P256_SUITE, RSA_SUITE } from "./fixtures.js";

/**
 * "Open on device": how many receipts a second the client library's `openReceipt` (WebCrypto only,
 * as an issuer app runs it) opens with a P-256 key against an RSA-2048 key, in this process, no server
 * involved in what is timed. The receipts are a real listing: a cardholder of each suite is registered
 * on a service and given `listCount` receipts, the listing is fetched once, and its receipts are then
 * opened one at a time, round-robin, the way an app opens the list it shows. Each key is imported once
 * (a device holds its key as a `CryptoKey`, the P-256 one as the pair its secure hardware gives), so
 * the figure is the unwrap and the AES-GCM open per receipt, not a key import per receipt.
 */

/** One suite's side: receipts opened in `seconds`. */
export interface DeviceSide {
  opened: number;
  seconds: number;
  opsPerSecond: number;
}

/** Both suites, measured in alternating slices; `ratio` is P-256 ops/s over RSA ops/s. */
export interface OpenOnDevice {
  receipts: number;
  rsa: DeviceSide;
  p256: DeviceSide;
  ratio: number;
}

interface Listing {
  receipts: ReceiptEnvelope[];
  key: PrivateKeyInput;
}

/** A fresh cardholder of `algorithm` with `count` receipts, its listing, and its key as a device holds it. */
async function listingOf(
  base: string,
  keys: ApiKeys,
  algorithm: KeyAlgorithm,
  count: number,
): Promise<Listing> {
  const tag = algorithm === RSA_SUITE ? "rsa" : "p256";
  const lister = await listerWith(base, keys, `device-${tag}`, count, algorithm);
  const res = await fetch(`${base}/api/v1/receipts/${lister.userId}?pageSize=${count}`, {
    headers: { "x-api-key": keys.issuer },
  });
  const envelope = (await res.json()) as { data?: { receipts?: ReceiptEnvelope[] } };
  const receipts = envelope.data?.receipts ?? [];
  if (!res.ok || receipts.length !== count) {
    throw new Error(
      `listing of the ${tag} cardholder: ${res.status}, ${receipts.length} of ${count} receipts`,
    );
  }
  const key: PrivateKeyInput =
    algorithm === RSA_SUITE
      ? await importRsaKey(lister.privateKey, "private")
      : {
          privateKey: await importP256Key(lister.privateKey, "private"),
          publicKey: await importP256Key(lister.publicKey, "public"),
        };
  // Every receipt must open before any is timed: a failure would otherwise count as speed.
  for (const receipt of receipts) await openReceipt(receipt, key);
  return { receipts, key };
}

/** Opens the listing's receipts one after another for `seconds`. */
async function openFor(listing: Listing, seconds: number): Promise<{ opened: number; seconds: number }> {
  const started = performance.now();
  const deadline = started + seconds * 1000;
  let opened = 0;
  while (performance.now() < deadline) {
    await openReceipt(listing.receipts[opened % listing.receipts.length] as ReceiptEnvelope, listing.key);
    opened++;
  }
  return { opened, seconds: (performance.now() - started) / 1000 };
}

function side(slices: { opened: number; seconds: number }[]): DeviceSide {
  const opened = slices.reduce((sum, s) => sum + s.opened, 0);
  const seconds = slices.reduce((sum, s) => sum + s.seconds, 0);
  return { opened, seconds, opsPerSecond: opened / seconds };
}

/**
 * Measures both suites over listings from the service at `base`: a warm-up of each, then `rounds`
 * alternating slices of `seconds / rounds` each, so background load weighs on both alike.
 */
export async function openOnDevice(
  base: string,
  keys: ApiKeys,
  options: { listCount: number; seconds: number; rounds: number; warmup: number },
): Promise<OpenOnDevice> {
  const rsa = await listingOf(base, keys, RSA_SUITE, options.listCount);
  const p256 = await listingOf(base, keys, P256_SUITE, options.listCount);
  await openFor(rsa, options.warmup);
  await openFor(p256, options.warmup);
  const rsaSlices: { opened: number; seconds: number }[] = [];
  const p256Slices: { opened: number; seconds: number }[] = [];
  for (let round = 0; round < options.rounds; round++) {
    rsaSlices.push(await openFor(rsa, options.seconds / options.rounds));
    p256Slices.push(await openFor(p256, options.seconds / options.rounds));
  }
  const [r, p] = [side(rsaSlices), side(p256Slices)];
  return { receipts: options.listCount, rsa: r, p256: p, ratio: p.opsPerSecond / r.opsPerSecond };
}
