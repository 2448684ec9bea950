import { create, equals, toBinary } from "@bufbuild/protobuf";
import { createContextValues, type HandlerContext } from "@connectrpc/connect";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import {
  ListReceiptsRequestSchema,
  type ListReceiptsResponse,
  ListReceiptsResponseSchema,
} from "../../gen/receipts/v1/receipts_pb.js";
import type { DomainDeps } from "../../src/domain/deps.js";
import { type FastPath, fastPathsOn, useFastPaths } from "../../src/fast-paths.js";
import { base64Of, base64TextOf, bytesFromBase64 } from "../../src/rpc/base64-bytes.js";
import { kPrincipal } from "../../src/rpc/context.js";
import { encryptedReceiptOf } from "../../src/rpc/convert.js";
import { compiledMessageToJsonText, OWN_JSON_TEXT } from "../../src/rpc/json-text.js";
import { receiptPageResponse } from "../../src/rpc/receipt-page.js";
import { receiptsService } from "../../src/rpc/services/receipts.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { createMongoStore } from "../../src/store/mongo/index.js";
import { receiptDoc, receiptRecord, sealedTextsOfDoc } from "../../src/store/mongo/receipt-docs.js";
import { sealedTextsOf, withSealedTexts } from "../../src/store/sealed-texts.js";
import type { ApiKeyRecord, ReceiptPage, ReceiptRecord } from "../../src/store/types.js";
import { fuzzSettings } from "../hardening/support.js";
import { FakeMongo } from "../store/fake-mongo/index.js";
import { at, escrowedReceipt, owner, receipt } from "../store/fixtures.js";
import { richStrings } from "../support/messages.js";

/**
 * A page of receipts answered over REST is written from the store's records (`receiptPageResponse`),
 * not from `EncryptedReceipt` messages: its text must be, character for character, what the compiled
 * writer gives for the plain message (`encryptedReceiptOf` of each record) for every record either
 * store can give (the memory store's records, the MongoDB store's read back from their documents, and
 * odd ones: corrupt stored texts, strings that need escaping, nulls, dates out of range), and the
 * message must read, copy, compare and encode as the plain one.
 */

const schema = ListReceiptsResponseSchema;

const strings = fc.oneof(
  richStrings,
  fc.constantFrom('"', "\\", "\u0000\n\u001f", "\u2028", "\ud800", "a\udc00", "\ud83d\ude00", ""),
);

const BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/** Texts as a store might hold them: canonical (long ones too), and corrupt in ways Node's decoder reads past. */
const storedTexts = fc.oneof(
  { weight: 4, arbitrary: fc.uint8Array({ maxLength: 60 }).map((b) => Buffer.from(b).toString("base64")) },
  fc.uint8Array({ minLength: 3000, maxLength: 9000 }).map((b) => Buffer.from(b).toString("base64")),
  fc
    .tuple(
      fc.uint8Array({ minLength: 3, maxLength: 6000 }),
      fc.nat(),
      fc.constantFrom('"', "\\", "\n", " ", "\u0001", "\ud841", "\u0141", "=", "==", "-", "_", "A"),
    )
    .map(([bytes, at, bad]) => {
      const text = Buffer.from(bytes).toString("base64");
      const i = at % text.length;
      return text.slice(0, i) + bad + text.slice(i + 1);
    }),
  fc.string({ unit: "binary", maxLength: 12 }),
  fc.array(fc.constantFrom(...BASE64, "=", '"', "\\", "\ud800"), { maxLength: 16 }).map((c) => c.join("")),
);

const dates = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.date({ min: new Date("0001-01-01T00:00:00Z"), max: new Date("9999-12-31T23:59:59.999Z") }),
  },
  fc.constantFrom(new Date(Number.NaN), new Date("10000-01-01T00:00:00Z"), new Date(-62135596800001)),
);

/** Now and then a value of another type where a field's own is expected (a document edited by hand). */
function odd<T>(arbitrary: fc.Arbitrary<T>): fc.Arbitrary<unknown> {
  return fc.oneof({ weight: 12, arbitrary }, fc.constantFrom(null, 7, true, "x", {}));
}

const keyBundle = fc.record(
  {
    keyId: odd(strings),
    algorithm: odd(fc.constantFrom("RSA-OAEP-256", "HPKE-P256-SHA256-A256GCM", "toString", "__proto__")),
    encryptedAesKey: odd(storedTexts),
    encapsulatedKey: odd(storedTexts),
    aadBound: odd(fc.constant(true)),
  },
  { requiredKeys: ["keyId", "algorithm", "encryptedAesKey"] },
);

const record = fc.record(
  {
    id: fc.string(),
    receiptId: odd(strings),
    merchantId: odd(strings),
    transactionId: odd(strings),
    version: odd(strings),
    merchantTenantId: fc.string(),
    panHash: fc.string(),
    userId: fc.string(),
    keyBundle,
    ciphertext: odd(storedTexts),
    iv: odd(storedTexts),
    authTag: odd(storedTexts),
    createdAt: odd(dates),
    isEscrowed: odd(fc.boolean()),
    escrowKeyId: odd(strings),
    expiresAt: odd(dates),
  },
  {
    requiredKeys: [
      "id",
      "receiptId",
      "merchantId",
      "transactionId",
      "version",
      "merchantTenantId",
      "panHash",
      "keyBundle",
      "ciphertext",
      "iv",
      "authTag",
      "createdAt",
      "isEscrowed",
    ],
  },
) as unknown as fc.Arbitrary<ReceiptRecord>;

/** A record as the MongoDB store gives it back: through its document (bytes as BSON binary when canonical). */
function viaMongo(r: ReceiptRecord): ReceiptRecord {
  try {
    return receiptRecord(receiptDoc(r));
  } catch {
    return r;
  }
}

const pages: fc.Arbitrary<ReceiptPage> = fc.record(
  {
    receipts: fc.array(fc.oneof(record, record.map(viaMongo)), { maxLength: 6 }),
    nextCursor: strings,
  },
  { requiredKeys: ["receipts"] },
);

function plainOf(page: ReceiptPage): ListReceiptsResponse {
  return {
    $typeName: "receipts.v1.ListReceiptsResponse",
    receipts: page.receipts.map(encryptedReceiptOf),
    nextPageToken: page.nextCursor ?? "",
  };
}

/** The text written, or the class of what was thrown on the way (the plain path throws for some records). */
function outcome(make: () => string): string {
  try {
    return make();
  } catch (err) {
    return `threw ${(err as Error).constructor.name}`;
  }
}

describe("a page of receipts written from its records", () => {
  it("is the compiled writer's text of the plain message, for every record either store gives", () => {
    let fromRecords = 0;
    fc.assert(
      fc.property(pages, (page) => {
        const message = receiptPageResponse(page);
        const own = (message as unknown as { [OWN_JSON_TEXT]: () => string | undefined })[OWN_JSON_TEXT]();
        if (own !== undefined) fromRecords++;
        const written = outcome(() => compiledMessageToJsonText(schema, message));
        expect(written).toBe(outcome(() => compiledMessageToJsonText(schema, plainOf(page))));
      }),
      fuzzSettings(1500),
    );
    // Most pages are of the store's shape, so written from their records; the others fall back.
    expect(fromRecords).toBeGreaterThan(100);
  });

  it("reads, copies, compares and encodes as the plain message, and is then written as one", () => {
    fc.assert(
      fc.property(pages, (page) => {
        let plain: ListReceiptsResponse;
        try {
          plain = plainOf(page);
        } catch {
          return; // a record the plain path cannot convert either
        }
        const message = receiptPageResponse(page);
        expect(Object.keys(message)).toEqual(["$typeName", "receipts", "nextPageToken"]);
        expect({ ...message }).toEqual({ ...plain });
        expect(structuredClone(message)).toEqual(structuredClone(plain));
        expect(equals(schema, message, plain)).toBe(true);
        expect(Buffer.from(toBinary(schema, message))).toEqual(Buffer.from(toBinary(schema, plain)));
        // Once read, the receipts are the message's own: a change to them is in the text.
        const [first] = message.receipts;
        const [plainFirst] = plain.receipts;
        if (first !== undefined && plainFirst !== undefined) {
          first.merchantId = `${first.merchantId}"changed`;
          plainFirst.merchantId = first.merchantId;
          const written = outcome(() => compiledMessageToJsonText(schema, message));
          expect(written).toBe(outcome(() => compiledMessageToJsonText(schema, plain)));
          if (!written.startsWith("threw")) expect(written).toContain(JSON.stringify(first.merchantId));
        }
      }),
      fuzzSettings(200),
    );
  });

  it("writes receipts set on it and a changed page token, not the records'", () => {
    const page: ReceiptPage = { receipts: [], nextCursor: "abc" };
    const message = receiptPageResponse(page);
    message.nextPageToken = 'next"one';
    expect(compiledMessageToJsonText(schema, message)).toBe('{"receipts":[],"nextPageToken":"next\\"one"}');
    message.receipts = plainOf({ receipts: [] }).receipts;
    expect(compiledMessageToJsonText(schema, message)).toBe('{"receipts":[],"nextPageToken":"next\\"one"}');
  });
});

/** The text a page's message writes by itself, or undefined when it leaves it to the compiled writer. */
function ownText(message: ListReceiptsResponse): string | undefined {
  return (message as unknown as { [OWN_JSON_TEXT]: () => string | undefined })[OWN_JSON_TEXT]();
}

/** The test's own account of canonical base64: what Node writes of the text's bytes is the text. */
function isCanonical(text: string): boolean {
  return Buffer.from(text, "base64").toString("base64") === text;
}

/** The sealed parts of a receipt: texts as a store might hold them, canonical or corrupt. */
const sealedParts = fc.record({
  ciphertext: storedTexts,
  iv: storedTexts,
  authTag: storedTexts,
  encryptedAesKey: storedTexts,
  encapsulatedKey: fc.option(storedTexts, { nil: undefined }),
});

type SealedParts = typeof sealedParts extends fc.Arbitrary<infer T> ? T : never;

function bundleOf(parts: SealedParts, keyId: string) {
  return {
    keyId,
    algorithm: parts.encapsulatedKey === undefined ? "RSA-OAEP-256" : "HPKE-P256-SHA256-A256GCM",
    encryptedAesKey: parts.encryptedAesKey,
    ...(parts.encapsulatedKey === undefined ? {} : { encapsulatedKey: parts.encapsulatedKey }),
  } as const;
}

describe("a page's sealed texts proven by its store", () => {
  it("memory store: its pages are written as the plain message's, before and after a key bundle changes", async () => {
    let proven = 0;
    let unproven = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(sealedParts, { minLength: 1, maxLength: 4 }),
        sealedParts,
        async (parts, rewrapped) => {
          const receipts = createMemoryStore().receipts;
          for (const [i, p] of parts.entries()) {
            const { encapsulatedKey: _e, encryptedAesKey: _k, ...texts } = p;
            await receipts.insert(
              receipt("u-1", { ...texts, keyBundle: bundleOf(p, `k-${i}`), createdAt: at(i) }),
            );
          }
          // An escrowed receipt released to the user, then released again with another key bundle.
          const escrowed = escrowedReceipt(owner("u-1").panHash, at(10_000), {
            createdAt: at(100),
            escrowOwnerTenantId: "tnt_issuer",
          });
          await receipts.insert(escrowed);
          const to = { userId: "u-1", keyBundle: bundleOf(parts[0] as SealedParts, "k-r") };
          expect(await receipts.release(escrowed, { ...to, issuerTenantId: "t" }, undefined, [], true)).toBe(
            true,
          );
          const texts = async () => {
            const page = await receipts.listByUser(owner("u-1"), 10);
            for (const [i, t] of (sealedTextsOf(page) ?? []).entries()) {
              const r = page.receipts[i] as ReceiptRecord;
              if (t === undefined) unproven++;
              else proven++;
              const canonical =
                [r.ciphertext, r.iv, r.authTag, r.keyBundle.encryptedAesKey].every(isCanonical) &&
                (r.keyBundle.encapsulatedKey === undefined || isCanonical(r.keyBundle.encapsulatedKey));
              expect(t !== undefined).toBe(canonical);
            }
            const own = ownText(receiptPageResponse(page));
            expect(own).toBeDefined();
            expect(own).toBe(compiledMessageToJsonText(schema, plainOf(page)));
          };
          await texts();
          await texts(); // the proofs remembered
          const again = { userId: "u-1", keyBundle: bundleOf(rewrapped, "k-again") };
          expect(await receipts.releaseAgain(escrowed, again, "tnt_issuer", at(200))).toBe(true);
          await texts();
        },
      ),
      fuzzSettings(300),
    );
    expect(proven).toBeGreaterThan(50);
    expect(unproven).toBeGreaterThan(50);
  });

  it("MongoDB store: texts read from BSON binary are proven, the others are not", () => {
    fc.assert(
      fc.property(record, (r) => {
        let doc: ReturnType<typeof receiptDoc>;
        try {
          doc = receiptDoc(r);
        } catch {
          return; // a record the document mapping refuses
        }
        const read = receiptRecord(doc);
        const texts = sealedTextsOfDoc(doc, read);
        const b = read.keyBundle;
        const parts = [read.ciphertext, read.iv, read.authTag, b.encryptedAesKey];
        if (b.encapsulatedKey !== undefined) parts.push(b.encapsulatedKey);
        if (texts !== undefined) expect(parts.every(isCanonical)).toBe(true);
        else expect(parts.every(isCanonical)).toBe(false);
        const page = withSealedTexts({ receipts: [read] }, [texts]);
        const written = outcome(() => compiledMessageToJsonText(schema, receiptPageResponse(page)));
        expect(written).toBe(outcome(() => compiledMessageToJsonText(schema, plainOf(page))));
      }),
      fuzzSettings(1500),
    );
  });

  it("MongoDB store (on the fake driver): a page read back is proven where its texts were stored as binary", async () => {
    const store = await createMongoStore({
      uri: "mongodb://fake.invalid/",
      dbName: "receipts_page",
      createClient: new FakeMongo({ seed: 1 }).createClient,
    });
    await store.init();
    const corrupt = `${Buffer.from("sealed part").toString("base64").slice(0, -1)}"`;
    await store.receipts.insert(receipt("u-1", { createdAt: at(1) }));
    await store.receipts.insert(receipt("u-1", { createdAt: at(2), iv: corrupt }));
    const page = await store.receipts.listByUser(owner("u-1"), 10);
    expect(page.receipts.map((r) => r.iv === corrupt)).toEqual([true, false]);
    expect(sealedTextsOf(page)?.map((t) => t !== undefined)).toEqual([false, true]);
    const own = ownText(receiptPageResponse(page));
    expect(own).toBe(compiledMessageToJsonText(schema, plainOf(page)));
    expect(own).not.toContain(corrupt);
  });

  it("takes a record's text as proven only while it is the very text proven", () => {
    const canonical = Buffer.from("sealed bytes").toString("base64");
    const r = receipt("u-1", { ciphertext: canonical });
    const page = withSealedTexts({ receipts: [r] }, [
      {
        ciphertext: canonical,
        iv: r.iv,
        authTag: r.authTag,
        encryptedAesKey: r.keyBundle.encryptedAesKey,
        encapsulatedKey: undefined,
      },
    ]);
    // Changed after the store proved it: a text Node's decoder reads past, which must not go in as it is.
    r.ciphertext = `${canonical.slice(0, 4)}"${canonical.slice(5)}`;
    const own = ownText(receiptPageResponse(page));
    expect(own).toBe(compiledMessageToJsonText(schema, plainOf(page)));
    expect(own).not.toContain(r.ciphertext);
  });
});

describe("base64TextOf", () => {
  it("is base64Of(bytesFromBase64(text)) for every text", () => {
    fc.assert(
      fc.property(fc.oneof(storedTexts, fc.string({ unit: "binary" })), (text) => {
        expect(base64TextOf(text)).toBe(base64Of(bytesFromBase64(text)));
      }),
      fuzzSettings(2000),
    );
  });
});

describe("the list handler", () => {
  const before: FastPath[] = fastPathsOn();
  afterEach(() => useFastPaths(before));

  /** The handler's answer for one page, over a store stand-in that gives that page. */
  async function answer(page: ReceiptPage): Promise<ListReceiptsResponse> {
    const user = { userId: "u-1", tenantId: "t-1", panHash: "p" };
    const deps = {
      store: {
        users: { findById: async () => user },
        receipts: { listByUser: async () => page },
      },
    } as unknown as DomainDeps;
    const values = createContextValues().set(kPrincipal, { tenantId: "t-1" } as ApiKeyRecord);
    const ctx = { values } as unknown as HandlerContext;
    const request = create(ListReceiptsRequestSchema, { userId: "u-1" });
    return (await receiptsService(deps).listReceipts(request, ctx)) as ListReceiptsResponse;
  }

  it("answers a page written from its records with the JSON writer's fast path on, a plain message with it off", async () => {
    const page: ReceiptPage = {
      receipts: fc
        .sample(record.map(viaMongo), { numRuns: 200, seed: 7 })
        .filter((r) =>
          outcome(() =>
            JSON.stringify(encryptedReceiptOf(r), (_k, v) => (typeof v === "bigint" ? `${v}` : v)),
          ).startsWith("{"),
        )
        .slice(0, 5),
      nextCursor: "next",
    };
    useFastPaths(["json-writer"]);
    const fast = await answer(page);
    useFastPaths([]);
    const plain = await answer(page);
    expect(Object.getOwnPropertySymbols(fast)).toContain(OWN_JSON_TEXT);
    expect(Object.getOwnPropertySymbols(plain)).not.toContain(OWN_JSON_TEXT);
    expect(outcome(() => compiledMessageToJsonText(schema, fast))).toBe(
      outcome(() => compiledMessageToJsonText(schema, plainOf(page))),
    );
    expect(page.receipts).toHaveLength(5);
    expect(fast.nextPageToken).toBe("next");
    expect(plain.nextPageToken).toBe("next");
  });
});
