import { Writable } from "node:stream";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { CallHeaders } from "../../src/http/call-headers.js";
import { lazyChildLogger } from "../../src/http/lazy-logger.js";

/** What `forEach` visits, in order, as [name, value] pairs. */
function visited(headers: Headers): [string, string][] {
  const seen: [string, string][] = [];
  headers.forEach((value, name) => {
    seen.push([name, value]);
  });
  return seen;
}

describe("CallHeaders", () => {
  it("behaves like Headers for what calls use: case-insensitive names, append joins, forEach", () => {
    const skip = (name: string) => name === "host";
    const headers = CallHeaders.fromNode(
      { host: "x", "x-api-key": "rk_dev_1", "set-cookie": ["a=1", "b=2"], "x-empty": undefined },
      skip,
    );
    expect(visited(headers)).toEqual([
      ["x-api-key", "rk_dev_1"],
      ["set-cookie", "a=1, b=2"],
    ]);
    expect(headers.get("X-API-Key")).toBe("rk_dev_1");
    expect(headers.has("host")).toBe(false);
    expect(headers.has("x-empty")).toBe(false);
    expect(headers.get("set-cookie")).toBe("a=1, b=2");
    headers.append("X-Trace", "1");
    headers.append("x-trace", "2");
    headers.set("X-Request-Id", "r1");
    headers.delete("X-API-KEY");
    const seen = visited(headers);
    expect(seen).toEqual([
      ["set-cookie", "a=1, b=2"],
      ["x-trace", "1, 2"],
      ["x-request-id", "r1"],
    ]);
    expect([...headers]).toEqual(seen);
    expect(headers.get("missing")).toBeNull();
  });
});

describe("lazyChildLogger", () => {
  function capture(level: string) {
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk, _encoding, done) {
        lines.push(JSON.parse(String(chunk)) as Record<string, unknown>);
        done();
      },
    });
    return { root: pino({ level }, sink), lines };
  }

  it("writes enabled levels with the bindings and drops disabled ones without making the child", async () => {
    const { root, lines } = capture("warn");
    let children = 0;
    const counting = Object.assign(Object.create(root) as typeof root, {
      child: (...args: Parameters<typeof root.child>) => {
        children++;
        return root.child(...args);
      },
    });
    const log = lazyChildLogger(counting, { requestId: "req-1" });
    log.info({ a: 1 }, "dropped");
    log.debug("dropped too");
    expect(children).toBe(0);
    log.error({ code: "internal_server_error" }, "request failed");
    log.warn("second");
    await new Promise((resolve) => setImmediate(resolve));
    expect(children).toBe(1);
    expect(lines.map((l) => [l.msg, l.requestId])).toEqual([
      ["request failed", "req-1"],
      ["second", "req-1"],
    ]);
    expect(log.level).toBe("warn");
  });
});
