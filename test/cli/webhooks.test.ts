import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EXIT, runCli } from "../../src/cli/main.js";
import { verifyWebhook } from "../../src/client/webhooks.js";
import { newEvent } from "../../src/domain/event-types.js";
import { FAST_EVENTS, type Receiver, startReceiver, until } from "../events/support.js";
import { startService, type TestService } from "../support/harness.js";

/**
 * `receipts webhooks ...` against a running server with a tenant's own API key (docs/events.md: "the
 * command line does the same"): create (the secret printed once), list (never a secret), rotate,
 * the delivery log, replay, the feed and delete, each read back from what the service did.
 */

/** A stream that keeps what is written to it. */
function capture(): Writable & { text: () => string } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      chunks.push(String(chunk));
      done();
    },
  });
  return Object.assign(stream, { text: () => chunks.join("") });
}

let svc: TestService;
let receiver: Receiver;

/** Runs `receipts webhooks <args>` with the issuer's key against the service. */
async function webhooks(args: string[], apiKey = svc.issuerKey) {
  const out = capture();
  const err = capture();
  const code = await runCli(["webhooks", ...args, "--url", svc.baseUrl], out, err, {
    RECEIPTS_API_KEY: apiKey,
  });
  return { code, out: out.text(), err: err.text() };
}

beforeAll(async () => {
  svc = await startService({ env: FAST_EVENTS });
  receiver = await startReceiver();
});
afterAll(async () => {
  await svc?.close();
  await receiver?.close();
});

describe("receipts webhooks", () => {
  it("creates an endpoint, prints its secret once, and lists it without the secret", async () => {
    const made = await webhooks(["create", receiver.url, "--events", "user.erased,key.changed", "--json"]);
    expect(made.code, made.err).toBe(EXIT.ok);
    const endpoint = JSON.parse(made.out);
    expect(endpoint.secret).toMatch(/^whsec_/);
    expect(endpoint.events).toEqual(["user.erased", "key.changed"]);
    const listed = await webhooks(["list"]);
    expect(listed.code).toBe(EXIT.ok);
    expect(listed.out).toContain(endpoint.endpointId);
    expect(listed.out).toContain(receiver.url);
    expect(listed.out).not.toContain("whsec_");
  });

  it("rotates, shows the delivery log and the feed, replays an event, and deletes", async () => {
    const endpoint = JSON.parse((await webhooks(["create", receiver.url, "--json"])).out);
    const rotated = await webhooks(["rotate", endpoint.endpointId, "--signing-key"]);
    expect(rotated.code, rotated.err).toBe(EXIT.ok);
    const secret = /new secret \(shown once, keep it\): (whsec_\S+)/.exec(rotated.out)?.[1];
    expect(secret).toBeDefined();
    expect(secret).not.toBe(endpoint.secret);

    const event = newEvent("user.erased", "issuer-1", new Date(), { userId: "usr_cli" });
    await svc.store.events.append([event]);
    const arrived = () => receiver.received.filter((r) => r.headers["webhook-id"] === event.id);
    // Both endpoints of the tenant take user.erased: the first test's and this one.
    await until(() => arrived().length >= 2, 10_000, "the event's deliveries");
    const log = await webhooks(["deliveries", endpoint.endpointId]);
    expect(log.out).toContain(`${event.id}  user.erased  delivered  attempts=1`);
    const feed = await webhooks(["events", "--page-size", "200"]);
    expect(feed.out).toContain(`${event.id}  `);

    const replay = await webhooks(["replay", endpoint.endpointId, event.id]);
    expect(replay.code, replay.err).toBe(EXIT.ok);
    await until(() => arrived().length >= 3, 10_000, "the replayed delivery");
    const again = arrived().at(-1);
    await expect(
      verifyWebhook(again?.body ?? "", again?.headers ?? {}, { secret: secret as string }),
    ).resolves.toMatchObject({ id: event.id });

    expect((await webhooks(["delete", endpoint.endpointId])).code).toBe(EXIT.ok);
    expect((await webhooks(["list"])).out).not.toContain(endpoint.endpointId);
  });

  it("fails with the service's error and a usage error without a key", async () => {
    const refused = await webhooks(["create", "ftp://x.example/", "--json"]);
    expect(refused.code).toBe(EXIT.failure);
    expect(JSON.parse(refused.err).error.code).toBe("invalid_request");
    const noKey = await webhooks(["list"], "");
    expect(noKey.code).toBe(EXIT.usage);
    expect(noKey.err).toMatch(/--api-key/);
  });
});
