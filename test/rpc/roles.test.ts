import type { DescMethod } from "@bufbuild/protobuf";
import { createContextValues } from "@connectrpc/connect";
import { beforeAll, describe, expect, it } from "vitest";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { FakeClock } from "../../src/clock.js";
import { DEFAULT_TIERS } from "../../src/config.js";
import { createApiKey } from "../../src/domain/api-keys.js";
import { AppError } from "../../src/errors.js";
import { kPrincipal } from "../../src/rpc/context.js";
import { accessInterceptor } from "../../src/rpc/interceptors.js";
import { API_SERVICES, rolesFor } from "../../src/rpc/policy.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/types.js";

/**
 * Issue 38: the role tests read the expected roles from the table they check, so a merchant key
 * allowed to call Register passed all of them. Here every RPC's roles are written out by hand, from
 * the README's table of endpoints and roles, and every method is called through the real access
 * interceptor with an issuer key, a merchant key and no key: a change to the table (or to the check)
 * fails this test.
 */
const ISSUER = "I";
const MERCHANT = "M";
const BOTH = "IM";
const MATRIX: Record<string, typeof ISSUER | typeof MERCHANT | typeof BOTH> = {
  "OnboardingService/GenerateKeys": ISSUER,
  "OnboardingService/Register": ISSUER,
  "OnboardingService/DeleteUser": ISSUER,
  "KeysService/GrantAccess": ISSUER,
  "KeysService/LookupKey": MERCHANT,
  "KeysService/RegisterEscrowKey": ISSUER,
  "KeysService/ListEscrowKeys": ISSUER,
  "KeysService/RevokeEscrowKey": ISSUER,
  "KeysService/ListAuditEvents": ISSUER,
  "KeysService/ListKtEntries": ISSUER,
  "KeysService/RegisterIssuerSigningKey": ISSUER,
  "KeysService/ListIssuerSigningKeys": ISSUER,
  "KeysService/RevokeIssuerSigningKey": ISSUER,
  "KeysService/KtSelfCheck": ISSUER,
  "ReceiptsService/EncryptReceipt": MERCHANT,
  "ReceiptsService/DecryptReceipt": ISSUER,
  "ReceiptsService/ListReceipts": ISSUER,
  "ReceiptsService/GetTransactionReceipt": MERCHANT,
  "ReceiptsService/RegisterSigningKey": MERCHANT,
  "ReceiptsService/StoreSealedReceipt": MERCHANT,
  "ReceiptsService/ListPendingEscrow": ISSUER,
  "ReceiptsService/ReleaseEscrow": ISSUER,
  "ReceiptsService/ListSigningKeys": BOTH,
  "ReceiptsService/RevokeSigningKey": MERCHANT,
  "PaymentsService/CreatePayment": MERCHANT,
  "PaymentsService/DecryptPayment": ISSUER,
  "PaymentsService/GetPayment": MERCHANT,
  "PaymentsService/ListPayments": MERCHANT,
  "PaymentsService/RefundPayment": MERCHANT,
  "WebhooksService/CreateWebhookEndpoint": BOTH,
  "WebhooksService/ListWebhookEndpoints": BOTH,
  "WebhooksService/DeleteWebhookEndpoint": BOTH,
  "WebhooksService/RotateWebhookSecret": BOTH,
  "WebhooksService/ListWebhookDeliveries": BOTH,
  "WebhooksService/ReplayWebhookEvent": BOTH,
  "EventsService/ListEvents": BOTH,
  "EventsService/WatchEvents": BOTH,
};

const methods = API_SERVICES.flatMap((service) => service.methods);
const nameOf = (method: (typeof methods)[number]) => `${method.parent.name}/${method.name}`;

describe("roles, as written here by hand", () => {
  let store: Store;
  const keys: Record<string, string> = {};
  beforeAll(async () => {
    store = createMemoryStore();
    const now = new Date("2026-03-01T00:00:00Z");
    for (const role of ["issuer", "merchant"] as const) {
      const made = await createApiKey(store, "dev", { tenantId: `t-${role}`, role, tier: "standard" }, now);
      keys[role] = made.key;
    }
  });

  /** What the interceptor answers for `method` called with `apiKey`: "ok" (the handler ran) or an error code. */
  async function call(method: DescMethod, apiKey: string | undefined): Promise<string> {
    const intercept = accessInterceptor({
      store,
      config: { env: "dev", tiers: DEFAULT_TIERS },
      clock: new FakeClock("2026-03-01T00:00:00Z"),
    });
    const contextValues = createContextValues();
    const header = new Headers(apiKey === undefined ? {} : { "x-api-key": apiKey });
    const req = { method, header, contextValues } as unknown as Parameters<ReturnType<typeof intercept>>[0];
    const handler = intercept(async () => {
      if (rolesFor(method) !== "public") expect(contextValues.get(kPrincipal)?.role).toBeDefined();
      return { header: new Headers(), trailer: new Headers() } as never;
    });
    try {
      await handler(req);
      return "ok";
    } catch (err) {
      if (err instanceof AppError) return err.code;
      throw err;
    }
  }

  it("lists every method of the keyed services, and no other", () => {
    expect(methods.map(nameOf).sort()).toEqual(Object.keys(MATRIX).sort());
  });

  it.each(Object.entries(MATRIX))("%s: %s only", async (name, allowed) => {
    const method = methods.find((m) => nameOf(m) === name);
    if (method === undefined) throw new Error(`no method ${name}`);
    const expected = {
      issuer: allowed.includes(ISSUER) ? "ok" : "forbidden",
      merchant: allowed.includes(MERCHANT) ? "ok" : "forbidden",
      none: "unauthorized",
    };
    expect({
      issuer: await call(method, keys.issuer),
      merchant: await call(method, keys.merchant),
      none: await call(method, undefined),
    }).toEqual(expected);
    expect([...(rolesFor(method) as string[])].sort()).toEqual(
      [allowed.includes(ISSUER) ? "issuer" : "", allowed.includes(MERCHANT) ? "merchant" : ""].filter(
        Boolean,
      ),
    );
  });

  it("lets a health check through with no key, and refuses a keyed service's unlisted method to everyone", async () => {
    const check = Health.method.check;
    expect(rolesFor(check)).toBe("public");
    expect(await call(check, undefined)).toBe("ok");
    // A new RPC of a keyed service that nobody added to the table: reachable by no role (fails safe).
    const unlisted = { ...ReceiptsService.method.encryptReceipt, name: "ExportEverything" } as DescMethod;
    expect(rolesFor(unlisted)).toEqual([]);
    expect([await call(unlisted, keys.issuer), await call(unlisted, keys.merchant)]).toEqual([
      "forbidden",
      "forbidden",
    ]);
  });
});
