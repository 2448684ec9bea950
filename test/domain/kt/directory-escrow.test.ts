import { generateKeyPairSync } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Envelope, post, startService, type TestService } from "../../support/harness.js";

/**
 * The directory snapshots of the key log follow a tenant's escrow key (docs/key-transparency.md: each
 * issuer's current escrow key is in the directory): registering one and revoking it each lead to a snapshot
 * that shows the change, which a merchant's verification and the issuer's monitor rely on.
 */
describe("directory snapshots and issuer escrow keys", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService({ env: { KT_SEQUENCER_POLL_MS: "20" } });
  });
  afterAll(() => svc.close());

  /** The escrow key the newest snapshot lists for the service's issuer tenant, once it shows `want`. */
  async function listed(want: string | null): Promise<string | null> {
    let seen: string | null | undefined;
    for (let i = 0; i < 200; i++) {
      const answer = await svc.app.domain.kt.proofs().catch(() => undefined);
      const body = answer && (await svc.store.ktLog.directory(answer.directory.sha256));
      const issuers =
        body === undefined ? [] : (JSON.parse(body.json).issuers as Array<Record<string, unknown>>);
      const entry = issuers.find((e) => e.issuer === "issuer-1");
      seen = ((entry?.escrowKey as { keyId: string } | null | undefined) ?? null)?.keyId ?? null;
      if (seen === want) return seen;
      await new Promise((r) => setTimeout(r, 20));
    }
    return seen ?? null;
  }

  it("snapshots the directory when an escrow key is registered and when it is revoked", async () => {
    const spki = generateKeyPairSync("ec", { namedCurve: "P-256" })
      .publicKey.export({ format: "der", type: "spki" })
      .toString("base64");
    const created = await post(svc, "/api/v1/issuers/escrow-keys", svc.issuerKey, { publicKey: spki });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const id = (created.body as Envelope).data.escrowKeyId as string;
    expect(await listed(id)).toBe(id);
    const res = await fetch(`${svc.baseUrl}/api/v1/issuers/escrow-keys/${id}`, {
      method: "DELETE",
      headers: { "x-api-key": svc.issuerKey },
    });
    expect(res.status).toBe(200);
    expect(await listed(null)).toBeNull();
  });
});
