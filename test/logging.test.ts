import { describe, expect, it } from "vitest";
import { lazyChildLogger } from "../src/http/lazy-logger.js";
import { createLogger, redactSecrets } from "../src/logging.js";

/**
 * Issue 38's live defect: redaction reached one level deep, so `log.info({ req: { body: { privateKey } } })`
 * wrote the private key. Every secret the service handles, named here by hand (not read from the list
 * under test), is logged at trace level through the real logger configuration, nested at many depths,
 * inside arrays, in errors and in child bindings, with non-secret neighbours; none may appear in the
 * output, and every neighbour must.
 */

/** Each secret field and a value no other part of the test contains. */
const SECRETS: Record<string, string> = {
  privateKey: "MIIEvAIBADANBgkqhkiG9w0BAQEFAASCBKYwggSiAgEAAoIBAQC-secret-1",
  escrowPrivateKeys: "escrow-private-key-secret-2",
  hashedPan: "a1".repeat(32),
  recipientHashedPan: "b2".repeat(32),
  hashedPanPepper: "pepper-secret-3",
  par: "V0010013018284738432583719583",
  paymentAccountReference: "PAR-secret-4",
  tokenId: "tok_secret5",
  accessTokenId: "tok_secret6",
  token: "bearer-secret-7",
  clientSecret: "cs_secret8",
  apiKey: "rk_live_secret9",
  "x-api-key": "rk_live_secret10",
  adminToken: "adm_secret11",
  authorization: "Bearer adm_secret12",
  webhookSecret: "whsec_secret13",
  statement: "statement-secret-14",
  opening: "opening-secret-15",
  cardNonce: "cnon:secret-16",
  plaintext: "plaintext-secret-17",
  receipt: "receipt-contents-secret-18",
  privateKeys: "private-keys-secret-23",
  escrowPrivateKey: "escrow-private-key-secret-24",
  aesKey: "aes-key-secret-25",
  rawKey: "raw-key-secret-26",
  pepper: "pepper-secret-27",
  cookie: "session=cookie-secret-28",
  secret: "plain-secret-29",
  signingSecret: "signing-secret-30",
  password: "password-secret-31",
  passphrase: "passphrase-secret-32",
  "x-receipt-signature": "receipt-signature-secret-33",
  pan: "4000000000000034",
  hashedPans: "hashed-pans-secret-35",
  pars: "pars-secret-36",
  statements: "statements-secret-37",
  openings: "openings-secret-38",
  recipientPar: "Q1RECIPIENTPARSECRET000000039",
  panHash: "keyed-card-reference-secret-40",
};

/** Spellings of the same names a caller might use. */
const SPELLINGS: Record<string, string> = {
  private_key: "snake-case-secret-19",
  PrivateKey: "pascal-case-secret-20",
  "X-API-KEY": "upper-header-secret-21",
  hashed_pan: "snake-pan-secret-22",
  // U+212A KELVIN SIGN, whose lower case is the letter k: "apiKey" to a case-insensitive reader.
  "api\u212Aey": "kelvin-sign-secret-41",
};

function capture(): { lines: string[]; logger: ReturnType<typeof createLogger> } {
  const lines: string[] = [];
  return { lines, logger: createLogger("trace", { write: (line: string) => lines.push(line) }) };
}

/** `value` wrapped `depth` levels deep in objects, alternating with arrays. */
function nest(value: unknown, depth: number): unknown {
  let out = value;
  for (let i = 0; i < depth; i++) out = i % 2 === 0 ? { level: i, inner: out } : [{ keep: `keep-${i}` }, out];
  return out;
}

function expectClean(lines: string[]): void {
  const text = lines.join("\n");
  for (const [name, secret] of Object.entries({ ...SECRETS, ...SPELLINGS })) {
    expect(text, `${name} leaked`).not.toContain(secret);
  }
}

describe("log redaction at any depth", () => {
  it("redacts each secret in a request body, as in log.info({ req: { body } })", () => {
    const { lines, logger } = capture();
    logger.info({ req: { body: { ...SECRETS, merchantName: "keep-merchant" } } }, "request");
    expectClean(lines);
    const body = JSON.parse(lines[0] as string).req.body;
    expect(body.merchantName).toBe("keep-merchant");
    for (const name of Object.keys(SECRETS)) expect(body[name], name).toBe("[redacted]");
  });

  it("redacts at every depth up to 40 and inside arrays, at every level from trace to fatal", () => {
    const { lines, logger } = capture();
    const levels = ["trace", "debug", "info", "warn", "error", "fatal"] as const;
    for (let depth = 0; depth <= 40; depth++) {
      const level = levels[depth % levels.length] as (typeof levels)[number];
      logger[level](
        { call: nest({ ...SECRETS, ...SPELLINGS, keep: `keep-depth-${depth}` }, depth) },
        "nested",
      );
      logger[level]({ list: [[{ items: [SECRETS, { keep: `keep-list-${depth}` }] }]] }, "arrays");
    }
    expect(lines).toHaveLength(82);
    expectClean(lines);
    // What is not secret is still there (up to the depth that is walked at all).
    expect(lines.join("\n")).toContain("keep-depth-20");
    expect(lines.join("\n")).toContain("keep-list-40");
  });

  it("redacts in errors, in child bindings, and through the per-request lazy child", () => {
    const { lines, logger } = capture();
    const error = Object.assign(new Error("decrypt failed"), {
      privateKey: SECRETS.privateKey,
      detail: { tokenId: SECRETS.tokenId },
    });
    logger.error({ err: error }, "with an error");
    logger.error(error);
    logger
      .child({ apiKey: SECRETS.apiKey, request: { headers: { "x-api-key": SECRETS["x-api-key"] } } })
      .info("bound");
    lazyChildLogger(logger, { requestId: "req_1", auth: { authorization: SECRETS.authorization } }).trace(
      { body: { items: [{ par: SECRETS.par }] } },
      "lazy",
    );
    expectClean(lines);
    const text = lines.join("\n");
    expect(text).toContain("decrypt failed");
    expect(text).toContain("req_1");
    expect(lines).toHaveLength(4);
  });

  it("keeps objects without secrets as they are, and survives cycles", () => {
    const { lines, logger } = capture();
    const cyclic: Record<string, unknown> = { name: "keep-cycle", privateKey: SECRETS.privateKey };
    cyclic.self = cyclic;
    logger.info({ cyclic, date: new Date(0), buffer: Buffer.from("keep") }, "odd values");
    expectClean(lines);
    expect(lines[0]).toContain("keep-cycle");
    expect(lines[0]).toContain("1970-01-01T00:00:00.000Z");
  });
});

describe("the redaction walk", () => {
  it("copies only what holds a secret: the caller's objects are never changed, clean ones are returned as they are", () => {
    const clean = { a: 1, list: [{ b: 2 }, "c"], nested: { d: { e: [3] } }, absent: undefined };
    expect(redactSecrets(clean)).toBe(clean);
    const list = [{ keep: 1 }, { token: "t-secret" }];
    const input = { call: { list, keep: "k" }, token: undefined };
    const out = redactSecrets(input);
    expect(out).toEqual({
      call: { list: [{ keep: 1 }, { token: "[redacted]" }], keep: "k" },
      token: undefined,
    });
    expect(Array.isArray(out.call.list)).toBe(true);
    expect(list[1]).toEqual({ token: "t-secret" });
    expect(input.call.list).toBe(list);
    expect(out.call.list[0]).toBe(list[0]);
    expect(redactSecrets({ privateKey: undefined })).toEqual({ privateKey: undefined });
    expect(redactSecrets([null, 1, "x", { pan: "4000" }])).toEqual([null, 1, "x", { pan: "[redacted]" }]);
  });

  it("walks 32 levels of objects and stops there with a marker, never with the secret", () => {
    let value: Record<string, unknown> = { privateKey: "deepest-secret" };
    for (let level = 40; level >= 0; level--) value = { keep: `level-${level}`, inner: value };
    const text = JSON.stringify(redactSecrets(value));
    expect(text).toContain('"keep":"level-31"');
    expect(text).not.toContain("level-32");
    expect(text).toContain('"inner":"[redacted: nested too deep]"');
    expect(text).not.toContain("deepest-secret");
    // Arrays count as levels too.
    let list: unknown = [{ keep: "array-bottom", privateKey: "array-secret" }];
    for (let level = 0; level < 40; level++) list = [list];
    const listed = JSON.stringify(redactSecrets({ list }));
    expect(listed).toContain("[redacted: nested too deep]");
    expect(listed).not.toContain("array-bottom");
  });

  it("writes a cycle as [Circular], and an object met twice (not a cycle) redacted both times", () => {
    const shared = { apiKey: "shared-secret", keep: "shared-keep" };
    const cyclic: Record<string, unknown> = { keep: "cyclic-keep" };
    cyclic.self = cyclic;
    cyclic.list = [cyclic];
    const sharedList = [{ tokenId: "list-secret" }];
    const out = redactSecrets({
      one: shared,
      two: shared,
      list: [shared, shared],
      cyclic,
      a: sharedList,
      b: sharedList,
    });
    expect([out.a, out.b]).toEqual([[{ tokenId: "[redacted]" }], [{ tokenId: "[redacted]" }]]);
    expect(out.one).toEqual({ apiKey: "[redacted]", keep: "shared-keep" });
    expect(out.two).toEqual(out.one);
    expect(out.list).toEqual([out.one, out.one]);
    expect(out.cyclic).toEqual({ keep: "cyclic-keep", self: "[Circular]", list: ["[Circular]"] });
    const withSecret: Record<string, unknown> = { token: "cycle-secret" };
    withSecret.self = withSecret;
    expect(redactSecrets({ withSecret })).toEqual({
      withSecret: { token: "[redacted]", self: "[Circular]" },
    });
  });

  it("leaves class instances to pino as they are (their own toJSON), and walks errors and null-prototype objects", () => {
    class Money {
      constructor(
        readonly amount: number,
        readonly token: string,
      ) {}
      toJSON() {
        return `${this.amount} EUR`;
      }
    }
    const money = new Money(950, "not-walked");
    const bare = Object.assign(Object.create(null) as Record<string, unknown>, { secret: "bare-secret" });
    const out = redactSecrets({ money, bare, when: new Date(0) });
    expect(out.money).toBe(money);
    expect(out.bare).toEqual({ secret: "[redacted]" });
    const { lines, logger } = capture();
    logger.info({ money, bare }, "values");
    const line = JSON.parse(lines[0] as string);
    expect(line).toMatchObject({ money: "950 EUR", bare: { secret: "[redacted]" }, service: "receipts" });
    const error = Object.assign(new TypeError("bad"), { pepper: "error-pepper" });
    const copy = redactSecrets(error) as TypeError & { pepper: string };
    expect([copy instanceof TypeError, copy.message, copy.stack, copy.pepper]).toEqual([
      true,
      "bad",
      error.stack,
      "[redacted]",
    ]);
    expect(error.pepper).toBe("error-pepper");
    logger.error({ err: error }, "failed");
    expect(JSON.parse(lines[1] as string).err).toMatchObject({ pepper: "[redacted]", stack: error.stack });
  });
});
