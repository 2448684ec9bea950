import { mkdtempSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, DEFAULT_TIERS, loadConfig } from "../src/config.js";
import { COSIGNATURE_ED25519, formatVkey, NOTE_ED25519 } from "../src/kt/note.js";
import { formatNoteSkey, generateNoteSigner } from "../src/kt/note-keys.js";
import { ESCROW_FIXTURE } from "./support/fixture-keys.js";

const PEPPER = "p".repeat(40);
/** A webhook sealing key as production needs it: base64 of 32 bytes. */
const WEBHOOK_KEY = Buffer.alloc(32, 7).toString("base64");
const LOG_KEY = formatNoteSkey(generateNoteSigner("kt.example.com/receipts/kt/v1", NOTE_ED25519));

function problemsOf(env: NodeJS.ProcessEnv): string[] {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe("loadConfig", () => {
  it("starts with safe development defaults and no configuration at all", () => {
    const config = loadConfig({});
    expect(config).toMatchObject({ port: 8080, env: "dev", store: "memory", grantTtlSeconds: 180 });
    // Reachable from this machine only, unless HOST says otherwise.
    expect(config.host).toBe("127.0.0.1");
    expect(loadConfig({ HOST: "0.0.0.0" }).host).toBe("0.0.0.0");
    expect(config.escrowRetentionDays).toBe(30);
    expect(config.bodyLimitBytes).toBe(1_048_576);
    expect(config.pepperGenerated).toBe(true);
    expect(config.hashedPanPepper.length).toBeGreaterThanOrEqual(32);
    expect(config.tiers).toEqual(DEFAULT_TIERS);
  });

  it("sizes the crypto thread pool from CRYPTO_THREADS, one per core by default", () => {
    expect(loadConfig({}).cryptoThreads).toBe(availableParallelism());
    expect(loadConfig({ CRYPTO_THREADS: "3" }).cryptoThreads).toBe(3);
    for (const bad of ["0", "-1", "1.5", "many", "257"]) {
      expect(problemsOf({ CRYPTO_THREADS: bad }).join("\n")).toMatch(
        /CRYPTO_THREADS must be an integer from 1 to 256/,
      );
    }
  });

  it("reads the HTTP/2 limits and the request timeout, with sane defaults, and names bad values", () => {
    expect(loadConfig({}).http2).toEqual({
      maxConcurrentStreams: 100,
      idleTimeoutMs: 72_000,
      resetBurst: 200,
      resetRatePerSecond: 50,
      maxConnectionsPerAddress: 100,
    });
    expect(loadConfig({}).requestTimeoutMs).toBe(30_000);
    const config = loadConfig({ HTTP2_MAX_CONCURRENT_STREAMS: "250", REQUEST_TIMEOUT_MS: "5000" });
    expect(config.http2.maxConcurrentStreams).toBe(250);
    expect(config.requestTimeoutMs).toBe(5_000);
    const problems = problemsOf({
      HTTP2_MAX_CONCURRENT_STREAMS: "0",
      HTTP2_IDLE_TIMEOUT_MS: "soon",
      HTTP2_RESET_BURST: "-5",
      HTTP2_RESET_RATE: "1.5",
      HTTP2_MAX_CONNECTIONS_PER_ADDRESS: "0",
      REQUEST_TIMEOUT_MS: "10",
    }).join("\n");
    expect(problems).toMatch(/HTTP2_MAX_CONCURRENT_STREAMS must be an integer from 1 to 10000 \(got "0"\)/);
    expect(problems).toMatch(/HTTP2_IDLE_TIMEOUT_MS must be an integer/);
    expect(problems).toMatch(/HTTP2_RESET_BURST must be an integer/);
    expect(problems).toMatch(/HTTP2_RESET_RATE must be an integer/);
    expect(problems).toMatch(/HTTP2_MAX_CONNECTIONS_PER_ADDRESS must be an integer from 1 to 1000000/);
    expect(loadConfig({ HTTP2_MAX_CONNECTIONS_PER_ADDRESS: "8" }).http2.maxConnectionsPerAddress).toBe(8);
    expect(problems).toMatch(/REQUEST_TIMEOUT_MS must be an integer from 1000/);
  });

  it("reads RECEIPT_RETENTION_DAYS: unset keeps receipts; whole days, never under the escrow's retention", () => {
    expect(loadConfig({}).receiptRetentionDays).toBeUndefined();
    expect(loadConfig({ RECEIPT_RETENTION_DAYS: "2555" }).receiptRetentionDays).toBe(2555);
    expect(loadConfig({ RECEIPT_RETENTION_DAYS: "30" }).receiptRetentionDays).toBe(30);
    for (const bad of ["0", "-1", "1.5", "seven years", "36501"]) {
      expect(problemsOf({ RECEIPT_RETENTION_DAYS: bad }).join("\n")).toMatch(
        /RECEIPT_RETENTION_DAYS must be an integer from 1 to 36500/,
      );
    }
    expect(problemsOf({ RECEIPT_RETENTION_DAYS: "29" })).toEqual([
      'RECEIPT_RETENTION_DAYS must be at least ESCROW_RETENTION_DAYS (30): a receipt is kept as long as unreleased escrow (got "29")',
    ]);
    expect(problemsOf({ RECEIPT_RETENTION_DAYS: "60", ESCROW_RETENTION_DAYS: "90" })).toHaveLength(1);
  });

  it("reads FAST_PATHS: on (all), off (none) or a list, and nothing else", () => {
    const all = ["grpc-server", "json-reader", "json-writer", "one-pass", "der"];
    expect(loadConfig({}).fastPaths).toEqual(all);
    expect(loadConfig({ FAST_PATHS: "on" }).fastPaths).toEqual(all);
    expect(loadConfig({ FAST_PATHS: "off" }).fastPaths).toEqual([]);
    expect(loadConfig({ FAST_PATHS: "der, json-writer" }).fastPaths).toEqual(["json-writer", "der"]);
    for (const bad of ["0", "false", "OFF", "no", "der,,json-writer"]) {
      expect(problemsOf({ FAST_PATHS: bad }).join("\n")).toMatch(/FAST_PATHS must be on, off or a list of/);
    }
  });

  it("reports every bad variable at once, by name", () => {
    const problems = problemsOf({
      PORT: "http",
      GRANT_TTL_SECONDS: "60",
      RECEIPTS_ENV: "prod",
      LOG_LEVEL: "loud",
    });
    expect(problems).toHaveLength(4);
    expect(problems.join("\n")).toMatch(/PORT.*"http"/);
    expect(problems.join("\n")).toMatch(/GRANT_TTL_SECONDS must be an integer from 120 to 180/);
    expect(problems.join("\n")).toMatch(/RECEIPTS_ENV must be one of live, test, dev/);
    expect(problems.join("\n")).toMatch(/LOG_LEVEL/);
  });

  it("refuses production without pepper, escrow key and MongoDB", () => {
    const problems = problemsOf({ RECEIPTS_ENV: "live" });
    expect(problems.some((p) => p.startsWith("HASHED_PAN_PEPPER is required in production"))).toBe(true);
    expect(
      problems.some((p) => p.startsWith("ESCROW_PRIVATE_KEY or ESCROW_PRIVATE_KEY_FILE is required")),
    ).toBe(true);
    expect(problems.some((p) => p.startsWith("STORE=mongodb is required in production"))).toBe(true);
    expect(problems).toContain("WEBHOOK_SECRET_KEY is required in production (RECEIPTS_ENV=live)");
  });

  it("accepts a complete production configuration", () => {
    const config = loadConfig({
      RECEIPTS_ENV: "live",
      STORE: "mongodb",
      MONGODB_URI: "mongodb://db:27017",
      HASHED_PAN_PEPPER: PEPPER,
      ESCROW_PRIVATE_KEY: ESCROW_FIXTURE.privateKey,
      WEBHOOK_SECRET_KEY: WEBHOOK_KEY,
      KT_LOG_PRIVATE_KEY: LOG_KEY,
    });
    expect(config.pepperGenerated).toBe(false);
    expect(config.events.secretKeyGenerated).toBe(false);
    expect(config.events.secretKeys).toEqual([Buffer.alloc(32, 7)]);
    expect(config.hashedPanPepper).toBe(PEPPER);
  });

  it("requires a real pepper and escrow key with MongoDB even outside production", () => {
    const problems = problemsOf({ STORE: "mongodb", MONGODB_URI: "mongodb://db" });
    expect(problems).toEqual([
      "HASHED_PAN_PEPPER is required with STORE=mongodb",
      "ESCROW_PRIVATE_KEY or ESCROW_PRIVATE_KEY_FILE is required with STORE=mongodb",
      "WEBHOOK_SECRET_KEY is required with STORE=mongodb",
      "KT_LOG_PRIVATE_KEY or KT_LOG_PRIVATE_KEY_FILE is required with STORE=mongodb",
    ]);
  });

  it("reads the webhook settings: the published retry schedule by default, compressible, bad values named", () => {
    const events = loadConfig({}).events;
    expect(events.retryScheduleMs).toEqual(
      [5, 300, 1_800, 7_200, 18_000, 36_000, 50_400, 72_000, 86_400].map((s) => s * 1_000),
    );
    // About three days in all (Standard Webhooks' 75 h 35 min).
    expect(events.retryScheduleMs.reduce((a, b) => a + b, 0) / 3_600_000).toBeCloseTo(75.58, 1);
    expect(events.disableAfterMs).toBe(5 * 86_400_000);
    expect(events.secretKeyGenerated).toBe(true);
    expect(events.secretKeys[0]).toHaveLength(32);
    const fast = loadConfig({
      WEBHOOK_RETRY_SCHEDULE: "20ms,50ms,1s",
      WEBHOOK_DISABLE_AFTER: "2s",
      WEBHOOK_SECRET_KEY: `${WEBHOOK_KEY},${Buffer.alloc(32, 1).toString("base64")}`,
    }).events;
    expect(fast.retryScheduleMs).toEqual([20, 50, 1_000]);
    expect(fast.disableAfterMs).toBe(2_000);
    expect(fast.secretKeys).toHaveLength(2);
    const problems = problemsOf({
      WEBHOOK_RETRY_SCHEDULE: "5s,soon",
      WEBHOOK_DISABLE_AFTER: "forever",
      WEBHOOK_SECRET_KEY: "c2hvcnQ=",
      EVENTS_WORKER: "maybe",
    });
    expect(problems).toHaveLength(4);
    expect(problems.join("\n")).toMatch(/WEBHOOK_RETRY_SCHEDULE must be/);
    expect(problems.join("\n")).toMatch(/WEBHOOK_DISABLE_AFTER must be a duration/);
    expect(problems.join("\n")).toMatch(/WEBHOOK_SECRET_KEY: key 1 must be base64 of 32 random bytes/);
    // The secret's value is never echoed.
    expect(problems.join("\n")).not.toContain("c2hvcnQ=");
  });

  it("rejects a short pepper and an unreadable escrow key file", () => {
    const problems = problemsOf({ HASHED_PAN_PEPPER: "short", ESCROW_PRIVATE_KEY_FILE: "/nonexistent/key" });
    expect(problems).toEqual([
      "HASHED_PAN_PEPPER must be at least 32 characters",
      "ESCROW_PRIVATE_KEY_FILE cannot be read (/nonexistent/key)",
    ]);
  });

  it("names an escrow private key that is not a key, or is given twice, without quoting it", () => {
    // Before, such a key passed the configuration check and the service died later with only
    // "The request is invalid." (exit 1), naming no variable.
    expect(problemsOf({ ESCROW_PRIVATE_KEY: "not-a-key" })).toEqual([
      "ESCROW_PRIVATE_KEY: key 1 must be an RSA (2048 bits or more, exponent 65537) or EC P-256 private key: base64 DER PKCS#8 or PEM",
    ]);
    const twice = `${ESCROW_FIXTURE.privateKey},${ESCROW_FIXTURE.privateKey}`;
    expect(problemsOf({ ESCROW_PRIVATE_KEY: twice })).toEqual([
      "ESCROW_PRIVATE_KEY: key 2 is the same key as an earlier one",
    ]);
    expect(problemsOf({ ESCROW_PRIVATE_KEY: ESCROW_FIXTURE.privateKey })).toEqual([]);
    const file = join(mkdtempSync(join(tmpdir(), "escrow-")), "escrow.pem");
    writeFileSync(file, "not a key either");
    expect(problemsOf({ ESCROW_PRIVATE_KEY_FILE: file })[0]).toMatch(
      /^ESCROW_PRIVATE_KEY_FILE: key 1 must be /,
    );
    expect(problemsOf({ ESCROW_PRIVATE_KEY: "not-a-key" }).join("\n")).not.toContain("not-a-key");
  });

  it("checks MONGODB_DB against MongoDB's database name rules", () => {
    // Before, a name the server refuses passed: the service started and stayed unready, or died
    // with the driver's message (exit 1) for a dot, naming no variable.
    expect(loadConfig({}).mongodbDb).toBe("receipts");
    expect(loadConfig({ MONGODB_DB: "receipts_prod-2" }).mongodbDb).toBe("receipts_prod-2");
    expect(problemsOf({ MONGODB_DB: "x".repeat(63) })).toEqual([]);
    for (const bad of ["a/b", "a.b", "a b", 'a"b', "a$b", "a\\b", "a\0b", "x".repeat(64), "é".repeat(32)]) {
      expect(problemsOf({ MONGODB_DB: bad }), bad).toEqual([
        `MONGODB_DB must be a MongoDB database name: under 64 bytes, without / \\ . " $, spaces or NUL (got ${JSON.stringify(bad)})`,
      ]);
    }
  });

  it("overrides tiers from RATE_LIMIT_TIERS and names bad entries", () => {
    const config = loadConfig({ RATE_LIMIT_TIERS: '{"standard":{"requestsPerMinute":1000000}}' });
    expect(config.tiers.standard).toEqual({ requestsPerMinute: 1_000_000, generateKeysPerMinute: 60 });
    expect(config.tiers.sandbox).toEqual(DEFAULT_TIERS.sandbox);
    expect(problemsOf({ RATE_LIMIT_TIERS: "{" })).toEqual(["RATE_LIMIT_TIERS must be a JSON object"]);
    expect(problemsOf({ RATE_LIMIT_TIERS: '{"gold":{}}' })[0]).toMatch(/unknown tier "gold"/);
    expect(problemsOf({ RATE_LIMIT_TIERS: '{"sandbox":{"requestsPerMinute":-1}}' })[0]).toMatch(
      /sandbox.requestsPerMinute must be a positive integer/,
    );
  });

  it("refuses production without the log's key, and reads the key log's settings", () => {
    expect(problemsOf({ RECEIPTS_ENV: "live" })).toContain(
      "KT_LOG_PRIVATE_KEY or KT_LOG_PRIVATE_KEY_FILE is required in production (RECEIPTS_ENV=live)",
    );
    const witness = formatVkey(generateNoteSigner("w1.bank-a.example", COSIGNATURE_ED25519).key);
    const config = loadConfig({
      KT_LOG_PRIVATE_KEY: LOG_KEY,
      WITNESS_URLS: `https://w1.bank-a.example/witness ${witness}`,
      KT_LOG_WAIT_MS: "2000",
    });
    expect(config.kt).toMatchObject({
      logPrivateKey: LOG_KEY,
      witnesses: [{ url: "https://w1.bank-a.example/witness", vkey: witness }],
      waitMs: 2_000,
      answerCosignatures: 1,
      sequencer: true,
    });
    expect(loadConfig({}).kt).toMatchObject({
      logPrivateKey: undefined,
      witnesses: [],
      answerCosignatures: 0,
    });
  });

  it("names a bad log key or witness without printing the key", () => {
    const logKey = generateNoteSigner("kt.example.com/receipts/kt/v1", NOTE_ED25519);
    const wrongName = formatNoteSkey(generateNoteSigner("kt.example.com", NOTE_ED25519));
    const tampered = LOG_KEY.replace(/\+[0-9a-f]{8}\+/, "+00000000+");
    const cosigner = formatNoteSkey(generateNoteSigner("kt.example.com/receipts/kt/v1", COSIGNATURE_ED25519));
    const problems = [wrongName, tampered, cosigner, "PRIVATE+KEY+x"].map((key) =>
      problemsOf({ KT_LOG_PRIVATE_KEY: key }),
    );
    expect(problems).toEqual([
      ["KT_LOG_PRIVATE_KEY must be named <host>/receipts/kt/v1 (the log's origin)"],
      ["KT_LOG_PRIVATE_KEY is not a log key: the key ID does not match the key"],
      ["KT_LOG_PRIVATE_KEY is not a log key: the key type must be 1"],
      ["KT_LOG_PRIVATE_KEY is not a log key: must be PRIVATE+KEY+<name>+<key id>+<key>"],
    ]);
    for (const p of problems.flat()) expect(p).not.toContain(formatNoteSkey(logKey).slice(-20));
    expect(problemsOf({ KT_LOG_PRIVATE_KEY: LOG_KEY, KT_LOG_PRIVATE_KEY_FILE: "/x" })).toEqual([
      "set only one of KT_LOG_PRIVATE_KEY and KT_LOG_PRIVATE_KEY_FILE",
    ]);
    const witness = formatVkey(generateNoteSigner("w1", COSIGNATURE_ED25519).key);
    const logVkey = formatVkey(logKey.key);
    expect(problemsOf({ WITNESS_URLS: `ftp://w1 ${witness}, https://w2 ${logVkey}, https://w3` })).toEqual([
      `WITNESS_URLS: "ftp://w1 ${witness}" is not "<http(s) URL> <witness vkey>"`,
      `WITNESS_URLS: "https://w2 ${logVkey}" is not "<http(s) URL> <witness vkey>"`,
      'WITNESS_URLS: "https://w3" is not "<http(s) URL> <witness vkey>"',
    ]);
    expect(problemsOf({ WITNESS_URLS: `https://a ${witness}\nhttps://b ${witness}` })).toEqual([
      "WITNESS_URLS: the witness w1 is listed twice",
    ]);
  });
});
