import { createHash, generateKeyPairSync, sign } from "node:crypto";
import { describe, expect, it } from "vitest";
import { toHex } from "../../src/kt/bytes.js";
import {
  ED25519_SMALL_ORDER,
  isStrictEd25519Point,
  parseSigningKey,
  type SignatureEngine,
  type SigningKey,
  signerHashOf,
  signingKeyIdOf,
  verifySignature,
} from "../../src/kt/signatures.js";
import { hex } from "./support.js";

/**
 * The signature rule from the forger's side, one boundary at a time (fast: a few signatures, no
 * sweeps; signatures.test.ts holds the shared vectors and the bit-flip sweeps). The encoding rules run
 * before any engine, so an engine "decides" nothing: here an engine that accepts everything stands in
 * for a lax library, and every forgery must be refused without it ever being asked.
 */

const ED_P = 2n ** 255n - 19n;
const ED_L = 2n ** 252n + 27742317777372353535851937790883648493n;
const P256_P = 0xffffffff00000001000000000000000000000000ffffffffffffffffffffffffn;
const P256_N = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n;
const P256_SPKI = "3059301306072a8648ce3d020106082a8648ce3d030107034200";
const ED25519_SPKI = "302a300506032b6570032100";

function le32(value: bigint): Uint8Array {
  const out = new Uint8Array(32);
  for (let i = 0; i < 32; i++) out[i] = Number((value >> BigInt(8 * i)) & 0xffn);
  return out;
}

function be32(value: bigint): Uint8Array {
  return le32(value).reverse();
}

function fromLE(bytes: Uint8Array): bigint {
  return BigInt(`0x${toHex(bytes.slice().reverse())}`);
}

function join(...parts: Uint8Array[]): Uint8Array {
  return new Uint8Array(Buffer.concat(parts));
}

/** An engine that says yes to everything, and remembers what it was asked. */
function laxEngine(): { engine: SignatureEngine; asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    engine: {
      ed25519: () => {
        asked.push("ed25519");
        return true;
      },
      p256: () => {
        asked.push("p256");
        return true;
      },
    },
  };
}

function parsed(spki: Uint8Array): SigningKey {
  const result = parseSigningKey(spki);
  if (!result.ok) throw new Error(result.reason);
  return result.key;
}

const message = new TextEncoder().encode("a statement of the key directory");

function edSigned() {
  const pair = generateKeyPairSync("ed25519");
  const key = parsed(new Uint8Array(pair.publicKey.export({ format: "der", type: "spki" })));
  const signature = new Uint8Array(sign(null, message, pair.privateKey));
  return { key, signature, R: signature.slice(0, 32), S: fromLE(signature.slice(32)) };
}

function p256Signed() {
  const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const key = parsed(new Uint8Array(pair.publicKey.export({ format: "der", type: "spki" })));
  const signature = new Uint8Array(
    sign("sha256", message, { key: pair.privateKey, dsaEncoding: "ieee-p1363" }),
  );
  return { key, signature };
}

/** Non-canonical and sign-bit encodings no strict verifier takes as a point: y = p, y = p + 1, and x = 0 with the sign bit set. */
const NON_CANONICAL = {
  "y = p": `ed${"ff".repeat(30)}7f`,
  "y = p + 1": `ee${"ff".repeat(30)}7f`,
  "y = 2^255 - 1": `${"ff".repeat(31)}7f`,
  "y = 1, sign set": `01${"00".repeat(30)}80`,
  "y = p - 1, sign set": `ec${"ff".repeat(31)}`,
};

describe("Ed25519: S < L, canonical and not small-order A and R, before any engine", () => {
  it("accepts the honest signature, and refuses S + L (the same point: the classic malleation)", () => {
    const { key, signature, R, S } = edSigned();
    expect(verifySignature(key, message, signature)).toBe(true);
    expect(S < ED_L).toBe(true);
    expect(verifySignature(key, message, join(R, le32(S + ED_L)))).toBe(false);
  });

  it("refuses S = L, S = L + 1 and S = 2^256 - 1 without asking the engine, and asks it for S = L - 1", () => {
    const { key, R } = edSigned();
    for (const S of [ED_L, ED_L + 1n, 2n ** 256n - 1n, ED_L + 2n ** 248n]) {
      const lax = laxEngine();
      expect(verifySignature(key, message, join(R, le32(S)), lax.engine), `S = ${S}`).toBe(false);
      expect(lax.asked).toEqual([]);
    }
    for (const S of [ED_L - 1n, 0n, 1n]) {
      const lax = laxEngine();
      expect(verifySignature(key, message, join(R, le32(S)), lax.engine), `S = ${S}`).toBe(true);
      expect(lax.asked).toEqual(["ed25519"]);
    }
  });

  it("refuses every small-order and non-canonical R without asking the engine", () => {
    const { key, S } = edSigned();
    const bad = [...ED25519_SMALL_ORDER, ...Object.values(NON_CANONICAL)];
    for (const R of bad) {
      const lax = laxEngine();
      expect(verifySignature(key, message, join(hex(R), le32(S)), lax.engine), R).toBe(false);
      expect(lax.asked, R).toEqual([]);
    }
  });

  it("refuses a key of small order or non-canonical even when it reaches the verifier unparsed", () => {
    const { R, S } = edSigned();
    for (const raw of [...ED25519_SMALL_ORDER, ...Object.values(NON_CANONICAL)]) {
      const key: SigningKey = { algorithm: "Ed25519", spki: hex(ED25519_SPKI + raw), raw: hex(raw) };
      const lax = laxEngine();
      expect(verifySignature(key, message, join(R, le32(S)), lax.engine), raw).toBe(false);
      expect(lax.asked, raw).toEqual([]);
    }
  });

  it("refuses an R that is canonical but no point of the curve, and a P-256 key that is no point, with the real engine", () => {
    const ed = edSigned();
    // y = 2 has no x on edwards25519: the equation check has no point to work with.
    const R = hex(`02${"00".repeat(31)}`);
    expect(isStrictEd25519Point(R)).toBe(true);
    expect(verifySignature(ed.key, message, join(R, ed.signature.slice(32)))).toBe(false);
    // A P-256 "key" that never went through parseSigningKey, off the curve: refused, not thrown.
    const ec = p256Signed();
    const raw = join(ec.key.raw.subarray(0, 33), ec.key.raw.subarray(1, 33));
    const key: SigningKey = { algorithm: "ECDSA-P256-SHA256", spki: join(hex(P256_SPKI), raw), raw };
    expect(verifySignature(key, message, ec.signature)).toBe(false);
  });

  it("refuses signatures of any length but 64, for both algorithms, without asking the engine", () => {
    const ed = edSigned();
    const ec = p256Signed();
    for (const { key, signature } of [ed, ec]) {
      for (const bad of [signature.subarray(0, 63), join(signature, new Uint8Array(1)), new Uint8Array(0)]) {
        const lax = laxEngine();
        expect(verifySignature(key, message, bad, lax.engine)).toBe(false);
        expect(verifySignature(key, message, bad)).toBe(false);
        expect(lax.asked).toEqual([]);
      }
    }
  });

  it("reads points strictly: 32 bytes, y < p, no negative zero, no small order", () => {
    const good = edSigned().key.raw;
    expect(isStrictEd25519Point(good)).toBe(true);
    expect(isStrictEd25519Point(good.subarray(0, 31))).toBe(false);
    expect(isStrictEd25519Point(join(good, new Uint8Array(1)))).toBe(false);
    // y = p - 2 (canonical, sign clear or set): not refused here (on the curve or not is the engine's question).
    const below = le32(ED_P - 2n);
    expect(isStrictEd25519Point(below)).toBe(true);
    below[31] = (below[31] as number) | 0x80;
    expect(isStrictEd25519Point(below)).toBe(true);
    // x = 0 and y = 1 or y = -1 are of small order: only their sign-bit encodings are not in the list.
    for (const [name, value] of Object.entries(NON_CANONICAL))
      expect(isStrictEd25519Point(hex(value)), name).toBe(false);
  });
});

describe("ECDSA P-256: r and s in [1, n-1], before any engine", () => {
  it("refuses r or s of 0, n, n + 1 and 2^256 - 1 without asking the engine; asks it for 1 and n - 1", () => {
    const { key, signature } = p256Signed();
    const [r, s] = [signature.slice(0, 32), signature.slice(32)];
    for (const bad of [0n, P256_N, P256_N + 1n, 2n ** 256n - 1n]) {
      for (const sig of [join(be32(bad), s), join(r, be32(bad))]) {
        const lax = laxEngine();
        expect(verifySignature(key, message, sig, lax.engine), `${bad}`).toBe(false);
        expect(lax.asked).toEqual([]);
      }
    }
    for (const edge of [1n, P256_N - 1n]) {
      for (const sig of [join(be32(edge), s), join(r, be32(edge)), join(be32(edge), be32(edge))]) {
        const lax = laxEngine();
        expect(verifySignature(key, message, sig, lax.engine), `${edge}`).toBe(true);
        expect(lax.asked).toEqual(["p256"]);
      }
    }
  });

  it("accepts the honest signature and its high-s twin, and refuses r + n (same r mod n)", () => {
    const { key, signature } = p256Signed();
    const r = BigInt(`0x${toHex(signature.slice(0, 32))}`);
    const s = BigInt(`0x${toHex(signature.slice(32))}`);
    expect(verifySignature(key, message, signature)).toBe(true);
    expect(verifySignature(key, message, join(be32(r), be32(P256_N - s)))).toBe(true);
    if (r + P256_N < 2n ** 256n)
      expect(verifySignature(key, message, join(be32(r + P256_N), be32(s)))).toBe(false);
  });

  it("does not run the Ed25519 rule on a P-256 key, nor the P-256 rule on an Ed25519 key", () => {
    const ec = p256Signed();
    const lax = laxEngine();
    // An r || s whose first half would be a small-order Ed25519 R: fine for P-256.
    const sig = join(hex(ED25519_SMALL_ORDER[0] as string), ec.signature.slice(32));
    expect(verifySignature(ec.key, message, sig, lax.engine)).toBe(true);
    expect(lax.asked).toEqual(["p256"]);
    const ed = edSigned();
    const edLax = laxEngine();
    // An R || S whose S is zero: a P-256 s of 0 would be refused, Ed25519 leaves it to the equation.
    expect(verifySignature(ed.key, message, join(ed.R, new Uint8Array(32)), edLax.engine)).toBe(true);
    expect(edLax.asked).toEqual(["ed25519"]);
  });
});

describe("signing keys, refused with their reason", () => {
  const good = new Uint8Array(
    generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey.export({ format: "der", type: "spki" }),
  );
  const goodX = toHex(good.subarray(27, 59));
  const goodY = toHex(good.subarray(59, 91));
  // (0, y0) is on P-256 (b is a square): x = p is the same point's x, written out of range.
  const y0 = "66485c780e2f83d72433bd5d84a06bb6541c2af31dae871728bf856a174f93f4";
  const pHex = toHex(be32(P256_P));

  const reasons: Record<string, [string, string]> = {
    "Ed25519 small order": [
      ED25519_SPKI + ED25519_SMALL_ORDER[1],
      "Ed25519 key is not canonical or is of small order",
    ],
    "Ed25519 y = p": [
      ED25519_SPKI + NON_CANONICAL["y = p"],
      "Ed25519 key is not canonical or is of small order",
    ],
    "Ed25519 y = 2, not on the curve": [
      `${ED25519_SPKI}02${"00".repeat(31)}`,
      "Ed25519 key is not a point of the curve",
    ],
    "P-256 compressed in an uncompressed-length SPKI": [
      `${P256_SPKI}02${goodX}${goodY}`,
      "P-256 key must be an uncompressed point",
    ],
    "P-256 x = p, (0, y0) on the curve mod p": [
      `${P256_SPKI}04${pHex}${y0}`,
      "P-256 key coordinates are not field elements",
    ],
    "P-256 y = p": [`${P256_SPKI}04${goodX}${pHex}`, "P-256 key coordinates are not field elements"],
    "P-256 off the curve": [`${P256_SPKI}04${goodX}${goodX}`, "P-256 key is not a point of the curve"],
    "Ed25519 SPKI one byte long": [
      `${ED25519_SPKI}${edHexKey()}00`,
      "not an Ed25519 or uncompressed P-256 SubjectPublicKeyInfo",
    ],
    "Ed25519 SPKI one byte short": [
      `${ED25519_SPKI}${edHexKey().slice(2)}`,
      "not an Ed25519 or uncompressed P-256 SubjectPublicKeyInfo",
    ],
    "P-256 SPKI one byte long": [
      `${toHex(good)}00`,
      "not an Ed25519 or uncompressed P-256 SubjectPublicKeyInfo",
    ],
    "P-256 point under the Ed25519 prefix": [
      `302a300506032b6571032100${edHexKey()}`,
      "not an Ed25519 or uncompressed P-256 SubjectPublicKeyInfo",
    ],
    "P-256 point under another curve's OID": [
      `${P256_SPKI.replace("0107", "0108")}04${goodX}${goodY}`,
      "not an Ed25519 or uncompressed P-256 SubjectPublicKeyInfo",
    ],
  };

  function edHexKey(): string {
    return toHex(edSigned().key.raw);
  }

  it.each(Object.entries(reasons))("%s", (_name, [spki, reason]) => {
    expect(parseSigningKey(hex(spki))).toEqual({ ok: false, reason });
  });

  it("keeps the key's bytes as given and its own copy: changing the input later changes nothing", () => {
    for (const spki of [good.slice(), hex(ED25519_SPKI + edHexKey())]) {
      const before = toHex(spki);
      const key = parsed(spki);
      expect(toHex(key.spki)).toBe(before);
      expect(toHex(key.raw)).toBe(before.slice(spki.length === 44 ? 24 : 52));
      expect(key.algorithm).toBe(spki.length === 44 ? "Ed25519" : "ECDSA-P256-SHA256");
      spki.fill(0);
      expect(toHex(key.spki)).toBe(before);
    }
  });

  it("names a key by the first 8 (signerHash) and 16 (signingKeyId) bytes of SHA-256 of its SPKI", () => {
    const digest = createHash("sha256").update(good).digest("hex");
    expect(toHex(signerHashOf(good))).toBe(digest.slice(0, 16));
    expect(signingKeyIdOf(good)).toBe(`sk_${digest.slice(0, 32)}`);
  });
});
