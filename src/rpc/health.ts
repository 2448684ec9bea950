import type { DescService } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus as Status } from "../../gen/grpc/health/v1/health_pb.js";
import { AppError } from "../errors.js";
import { API_SERVICES } from "./policy.js";

/**
 * The standard gRPC health service (`grpc.health.v1.Health`), for load balancers and service meshes.
 *
 * Every service shares one status: SERVING while `ready()` resolves true (the store is reachable),
 * NOT_SERVING when it resolves false or throws. `service` may be "" (the whole server), the health
 * service itself or any of `services` (default: the API services); another name is NOT_FOUND
 * for Check and SERVICE_UNKNOWN for Watch, as the health protocol prescribes. Watch sends the
 * current status once and ends; clients re-open it when they want a fresh one.
 */
export function healthService(
  ready: () => Promise<boolean>,
  services: readonly DescService[] = API_SERVICES,
): ServiceImpl<typeof Health> {
  const known = new Set(["", Health.typeName, ...services.map((s) => s.typeName)]);
  const status = async (): Promise<Status> => {
    try {
      return (await ready()) ? Status.SERVING : Status.NOT_SERVING;
    } catch {
      return Status.NOT_SERVING;
    }
  };
  return {
    async check(req) {
      if (!known.has(req.service)) {
        throw new AppError("not_found", `Unknown service "${req.service.slice(0, 200)}".`);
      }
      return { status: await status() };
    },
    async list() {
      const current = await status();
      return { statuses: Object.fromEntries([...known].map((name) => [name, { status: current }])) };
    },
    async *watch(req) {
      yield { status: known.has(req.service) ? await status() : Status.SERVICE_UNKNOWN };
    },
  };
}
