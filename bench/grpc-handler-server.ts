import { createServer } from "node:http2";
import { createContextValues } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { buildApp } from "../src/app.js";
import { loadConfig } from "../src/config.js";
import { createDevKeys, devKeysBanner } from "../src/dev-keys.js";
import { createLogger } from "../src/logging.js";
import { kRemoteAddress } from "../src/rpc/context.js";
import { createMemoryStore } from "../src/store/memory/index.js";

/**
 * The service of `bench/grpc-handlers.ts`: one process, one store, one domain, one interceptor chain,
 * served twice. `PORT` is the service's own one-port listener, where unary gRPC is taken by the
 * hand-written server of src/fast (`grpc-server`); `CONNECT_NODE_PORT` is a cleartext HTTP/2 server
 * whose every request goes to connect-node's own handler (`connectNodeAdapter`) with the same routes
 * and the same interceptor instances. Prints the development keys as `npm start` does.
 */
const config = loadConfig();
const logger = createLogger(config.logLevel);
const store = createMemoryStore();
const keys = await createDevKeys(store, new Date());
const app = await buildApp({ config, store, logger, shutdownGraceMs: 1_000 });
await app.server.listen(config.port, config.host);
const handler = connectNodeAdapter({
  routes: app.routes,
  interceptors: [...app.interceptors],
  grpc: true,
  grpcWeb: false,
  connect: false,
  readMaxBytes: config.bodyLimitBytes,
  contextValues: (req) => {
    const values = createContextValues();
    values.set(kRemoteAddress, req.socket.remoteAddress ?? "");
    return values;
  },
});
const h2 = createServer(handler);
await new Promise<void>((resolve) => h2.listen(Number(process.env.CONNECT_NODE_PORT), config.host, resolve));
process.stdout.write(devKeysBanner(keys));
process.on("SIGTERM", () => {
  h2.close();
  void app.close().then(() => process.exit(0));
});
