import type { DescService } from "@bufbuild/protobuf";
import { type Client, createClient } from "@connectrpc/connect";
import { type AppDeps, buildApp } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { createApiKey } from "../../src/domain/api-keys.js";
import { createLogger } from "../../src/logging.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Role } from "../../src/store/types.js";
import { ESCROW_FIXTURE } from "../support/fixture-keys.js";

/**
 * The RPC tier: the service built as `main` builds it (domain, every interceptor, the memory store),
 * never listening, called in memory through Connect's router transport (`inMemoryTransport`). A test
 * here runs the services' logic and the interceptor chain in milliseconds; what the wire adds
 * (HTTP, gRPC framing, REST transcoding) is the end-to-end tier's.
 */
export interface RpcFixture {
  /** A client of `service` calling with an API key of `role`, or with none. */
  client<S extends DescService>(service: S, key?: string): Client<S>;
  /** A fresh API key of `role` for tenant `tenantId`: the key and its record's id. */
  apiKey(role: Role, tenantId: string): Promise<{ key: string; id: string }>;
  close(): Promise<void>;
}

export async function rpcFixture(extra: Partial<Pick<AppDeps, "gateways">> = {}): Promise<RpcFixture> {
  const config = loadConfig({
    RECEIPTS_ENV: "dev",
    LOG_LEVEL: "silent",
    ESCROW_PRIVATE_KEY: ESCROW_FIXTURE.privateKey,
  });
  const store = createMemoryStore();
  await store.init();
  const app = await buildApp({ config, store, logger: createLogger("silent"), workers: 1, ...extra });
  const transport = app.server.inMemoryTransport();
  return {
    client: (service, key) =>
      createClient(service, {
        ...transport,
        unary: (method, signal, timeoutMs, header, input, values) => {
          const headers = new Headers(header);
          if (key !== undefined) headers.set("x-api-key", key);
          return transport.unary(method, signal, timeoutMs, headers, input, values);
        },
      }),
    async apiKey(role, tenantId) {
      const { key, record } = await createApiKey(
        store,
        "dev",
        { role, tier: "enterprise", tenantId },
        new Date(),
      );
      return { key, id: record.id };
    },
    close: () => app.close(),
  };
}
