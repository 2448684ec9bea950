import { describe, expect, it } from "vitest";
import { ownerOfBin, parseDirectory } from "../../src/kt/directory.js";
import { canonicalJson, type Json } from "../../src/kt/json.js";
import { formatTime } from "../../src/kt/statements.js";
import { makeIssuer, NOW, snapshotOf } from "./world.js";

/** The directory snapshot's rules: exact members, one owner per prefix at a time, the longest prefix wins. */

const a = makeIssuer("bank-a");
const b = makeIssuer("bank-b");

describe("directory snapshots", () => {
  it("finds the owner of the longest prefix in effect, and refuses a 6-digit BIN that an 8-digit prefix splits", () => {
    const parsed = parseDirectory(
      snapshotOf([
        { issuer: a, bins: ["411111"] },
        { issuer: b, bins: ["41111122"] },
      ]),
    );
    if (!parsed.ok) throw new Error(parsed.reason);
    expect(ownerOfBin(parsed.value, "41111122", "bin", NOW)).toMatchObject({
      ok: true,
      value: { issuer: "bank-b" },
    });
    expect(ownerOfBin(parsed.value, "41111133", "bin", NOW)).toMatchObject({
      ok: true,
      value: { issuer: "bank-a" },
    });
    expect(ownerOfBin(parsed.value, "411111", "bin", NOW)).toMatchObject({
      ok: false,
      reason: expect.stringContaining("8 digits"),
    });
    expect(ownerOfBin(parsed.value, "41111122", "token-bin", NOW).ok).toBe(false);
    expect(ownerOfBin(parsed.value, "52222222", "bin", NOW).ok).toBe(false);
    expect(ownerOfBin(parsed.value, "4111112", "bin", NOW).ok).toBe(false);
  });

  it("refuses two owners of one prefix at once, an issuer twice, a window over 48 h, and unknown members at any depth", () => {
    expect(
      parseDirectory(
        snapshotOf([
          { issuer: a, bins: ["411111"] },
          { issuer: b, bins: ["411111"] },
        ]),
      ),
    ).toMatchObject({
      ok: false,
      reason: expect.stringContaining("two owners"),
    });
    expect(
      parseDirectory(
        snapshotOf([
          { issuer: a, bins: ["411111"] },
          { issuer: a, bins: ["422222"] },
        ]),
      ).ok,
    ).toBe(false);
    expect(
      parseDirectory(snapshotOf([{ issuer: a, bins: [] }], { notAfter: formatTime(NOW + 48 * 3_600_000) }))
        .ok,
    ).toBe(false);
    const nested = JSON.parse(snapshotOf([{ issuer: a, bins: ["411111"] }])) as {
      issuers: Array<{ prefixes: Json[] }>;
    };
    (nested.issuers[0]?.prefixes[0] as { [k: string]: Json }).note = "x";
    expect(parseDirectory(canonicalJson(nested as unknown as Json))).toMatchObject({
      ok: false,
      reason: expect.stringContaining("unknown member"),
    });
  });

  it("hands a BIN over at effectiveFrom / effectiveUntil without two owners at once", () => {
    const raw = JSON.parse(
      snapshotOf([
        { issuer: a, bins: ["411111"] },
        { issuer: b, bins: ["411111"] },
      ]),
    ) as {
      issuers: Array<{ prefixes: Array<{ effectiveFrom: string; effectiveUntil: string | null }> }>;
    };
    const handover = formatTime(NOW + 3_600_000);
    (raw.issuers[0]?.prefixes[0] as { effectiveUntil: string | null }).effectiveUntil = handover;
    (raw.issuers[1]?.prefixes[0] as { effectiveFrom: string }).effectiveFrom = handover;
    const parsed = parseDirectory(canonicalJson(raw as unknown as Json));
    if (!parsed.ok) throw new Error(parsed.reason);
    expect(ownerOfBin(parsed.value, "41111100", "bin", NOW)).toMatchObject({ value: { issuer: "bank-a" } });
    expect(ownerOfBin(parsed.value, "41111100", "bin", NOW + 2 * 3_600_000)).toMatchObject({
      value: { issuer: "bank-b" },
    });
  });
});
