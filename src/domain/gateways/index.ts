import { invalidRequest } from "../../errors.js";
import type { PaymentGateway } from "./gateway.js";
import { createSandboxGatewayA, type SandboxDeps } from "./sandbox-a.js";
import { createSandboxGatewayB } from "./sandbox-b.js";

/** The built-in offline sandboxes of every gateway, sharing `deps`. */
export function createSandboxGateways(deps: SandboxDeps = {}): PaymentGateway[] {
  return [createSandboxGatewayA(deps), createSandboxGatewayB(deps)];
}

const sandboxes = createSandboxGateways();

/**
 * The gateway for a create-payment path's `{gateway}`. Throws `invalid_request` on `gateway` for any
 * other name (case-sensitive: the names are URL path segments). `gateways` defaults to the sandboxes;
 * pass real clients (other implementations of `PaymentGateway`) to use those instead.
 */
export function gatewayByName(name: string, gateways: readonly PaymentGateway[] = sandboxes): PaymentGateway {
  const gateway = gateways.find((g) => g.name === name);
  if (gateway === undefined) {
    const names = gateways.map((g) => g.name).join(", ");
    throw invalidRequest([{ field: "gateway", description: `must be one of ${names}` }]);
  }
  return gateway;
}
