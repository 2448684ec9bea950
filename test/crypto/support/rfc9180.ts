import { createCipheriv, createDecipheriv, createECDH, createHmac } from "node:crypto";

/**
 * A minimal, independent RFC 9180 base-mode implementation for the tests only: DHKEM(P-256,
 * HKDF-SHA256) with node:crypto's ECDH, HKDF-SHA256 written out from HMAC (RFC 5869), labeled
 * extract/expand (RFC 9180 section 4), the key schedule (section 5.1) and AES-GCM. It shares no code
 * with @hpke/core, so a receipt key wrapped by one and unwrapped by the other proves the wire format,
 * not just a library agreeing with itself. It is checked against RFC 9180's published vector first.
 */

const KEM_ID = 0x0010;
const KDF_ID = 0x0001;
const N_SECRET = 32;
const N_NONCE = 12;
const N_TAG = 16;

function i2osp(value: number, length: number): Buffer {
  const out = Buffer.alloc(length);
  const width = Math.min(length, 6);
  out.writeUIntBE(value, length - width, width);
  return out;
}

const utf8 = (text: string) => Buffer.from(text, "utf8");

function hkdfExtract(salt: Buffer, ikm: Buffer): Buffer {
  // RFC 5869: an absent salt is HashLen zero bytes.
  return createHmac("sha256", salt.length === 0 ? Buffer.alloc(32) : salt)
    .update(ikm)
    .digest();
}

function hkdfExpand(prk: Buffer, info: Buffer, length: number): Buffer {
  const blocks: Buffer[] = [];
  let previous = Buffer.alloc(0);
  for (let i = 1; Buffer.concat(blocks).length < length; i++) {
    previous = createHmac("sha256", prk)
      .update(Buffer.concat([previous, info, Buffer.from([i])]))
      .digest();
    blocks.push(previous);
  }
  return Buffer.concat(blocks).subarray(0, length);
}

function labeledExtract(suiteId: Buffer, salt: Buffer, label: string, ikm: Buffer): Buffer {
  return hkdfExtract(salt, Buffer.concat([utf8("HPKE-v1"), suiteId, utf8(label), ikm]));
}

function labeledExpand(suiteId: Buffer, prk: Buffer, label: string, info: Buffer, length: number): Buffer {
  const labeledInfo = Buffer.concat([i2osp(length, 2), utf8("HPKE-v1"), suiteId, utf8(label), info]);
  return hkdfExpand(prk, labeledInfo, length);
}

const KEM_SUITE = Buffer.concat([utf8("KEM"), i2osp(KEM_ID, 2)]);

/** DHKEM's ExtractAndExpand: the KEM shared secret from the DH output and the KEM context. */
function kemSharedSecret(dh: Buffer, enc: Buffer, pkRm: Buffer): Buffer {
  const eaePrk = labeledExtract(KEM_SUITE, Buffer.alloc(0), "eae_prk", dh);
  return labeledExpand(KEM_SUITE, eaePrk, "shared_secret", Buffer.concat([enc, pkRm]), N_SECRET);
}

/** The base-mode key schedule's outputs (RFC 9180 section 5.1). */
export interface Schedule {
  sharedSecret: Buffer;
  keyScheduleContext: Buffer;
  secret: Buffer;
  key: Buffer;
  baseNonce: Buffer;
  exporterSecret: Buffer;
}

function keySchedule(aeadId: number, sharedSecret: Buffer, info: Buffer): Schedule {
  const suiteId = Buffer.concat([utf8("HPKE"), i2osp(KEM_ID, 2), i2osp(KDF_ID, 2), i2osp(aeadId, 2)]);
  const nk = aeadId === 1 ? 16 : aeadId === 2 ? 32 : 0;
  if (nk === 0) throw new Error("only AES-128-GCM and AES-256-GCM here");
  const empty = Buffer.alloc(0);
  const pskIdHash = labeledExtract(suiteId, empty, "psk_id_hash", empty);
  const infoHash = labeledExtract(suiteId, empty, "info_hash", info);
  const keyScheduleContext = Buffer.concat([Buffer.from([0]), pskIdHash, infoHash]);
  const secret = labeledExtract(suiteId, sharedSecret, "secret", empty);
  return {
    sharedSecret,
    keyScheduleContext,
    secret,
    key: labeledExpand(suiteId, secret, "key", keyScheduleContext, nk),
    baseNonce: labeledExpand(suiteId, secret, "base_nonce", keyScheduleContext, N_NONCE),
    exporterSecret: labeledExpand(suiteId, secret, "exp", keyScheduleContext, 32),
  };
}

/** The nonce of message `sequence`: base_nonce XOR I2OSP(sequence, Nn). */
export function nonceOf(baseNonce: Buffer, sequence: number): Buffer {
  const seq = i2osp(sequence, N_NONCE);
  return Buffer.from(baseNonce.map((byte, i) => byte ^ (seq[i] ?? 0)));
}

function cipherName(key: Buffer) {
  return key.length === 16 ? "aes-128-gcm" : "aes-256-gcm";
}

/** AEAD seal of one message of a context. */
export function aeadSeal(schedule: Schedule, sequence: number, aad: Buffer, pt: Buffer): Buffer {
  const cipher = createCipheriv(
    cipherName(schedule.key),
    schedule.key,
    nonceOf(schedule.baseNonce, sequence),
    {
      authTagLength: N_TAG,
    },
  );
  cipher.setAAD(aad);
  return Buffer.concat([cipher.update(pt), cipher.final(), cipher.getAuthTag()]);
}

function aeadOpen(schedule: Schedule, sequence: number, aad: Buffer, ct: Buffer): Buffer {
  const decipher = createDecipheriv(
    cipherName(schedule.key),
    schedule.key,
    nonceOf(schedule.baseNonce, sequence),
    {
      authTagLength: N_TAG,
    },
  );
  decipher.setAAD(aad);
  decipher.setAuthTag(ct.subarray(ct.length - N_TAG));
  return Buffer.concat([decipher.update(ct.subarray(0, ct.length - N_TAG)), decipher.final()]);
}

/** SetupBaseS with a fixed ephemeral private key `skEm` (32 bytes): `enc` and the schedule. */
export function setupBaseSender(
  aeadId: number,
  pkRm: Buffer,
  info: Buffer,
  skEm: Buffer,
): { enc: Buffer; schedule: Schedule } {
  const ecdh = createECDH("prime256v1");
  ecdh.setPrivateKey(skEm);
  const enc = ecdh.getPublicKey();
  const dh = ecdh.computeSecret(pkRm);
  return { enc, schedule: keySchedule(aeadId, kemSharedSecret(dh, enc, pkRm), info) };
}

/** SetupBaseR: the schedule from `enc` and the recipient's private key `skRm` (32 bytes). */
export function setupBaseRecipient(aeadId: number, enc: Buffer, skRm: Buffer, info: Buffer): Schedule {
  const ecdh = createECDH("prime256v1");
  ecdh.setPrivateKey(skRm);
  const dh = ecdh.computeSecret(enc);
  return keySchedule(aeadId, kemSharedSecret(dh, enc, ecdh.getPublicKey()), info);
}

/** Single-shot base-mode seal (sequence 0) with a fresh or given ephemeral key. */
export function sealBase(
  aeadId: number,
  pkRm: Buffer,
  info: Buffer,
  aad: Buffer,
  pt: Buffer,
  skEm?: Buffer,
): { enc: Buffer; ct: Buffer } {
  let ephemeral = skEm;
  if (ephemeral === undefined) {
    const ecdh = createECDH("prime256v1");
    ecdh.generateKeys();
    ephemeral = ecdh.getPrivateKey();
  }
  const { enc, schedule } = setupBaseSender(aeadId, pkRm, info, ephemeral);
  return { enc, ct: aeadSeal(schedule, 0, aad, pt) };
}

/** Single-shot base-mode open (sequence 0); throws when authentication fails. */
export function openBase(
  aeadId: number,
  skRm: Buffer,
  enc: Buffer,
  info: Buffer,
  aad: Buffer,
  ct: Buffer,
): Buffer {
  return aeadOpen(setupBaseRecipient(aeadId, enc, skRm, info), 0, aad, ct);
}

/** Secret export (RFC 9180 section 5.3) from a schedule. */
export function exportSecret(aeadId: number, schedule: Schedule, context: Buffer, length: number): Buffer {
  const suiteId = Buffer.concat([utf8("HPKE"), i2osp(KEM_ID, 2), i2osp(KDF_ID, 2), i2osp(aeadId, 2)]);
  return labeledExpand(suiteId, schedule.exporterSecret, "sec", context, length);
}
