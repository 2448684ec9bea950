import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { build, type Plugin } from "esbuild";
import { type BrowserContext, chromium } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startService, type TestService } from "../support/harness.js";
import type { FlowConfig, FlowResult } from "./page/receipt-page.js";

/**
 * A real browser engine: Debian's Chromium driven by playwright-core. The page is served by this
 * test from its own origin (another port), so the service's CORS (CORS_ORIGINS) is exercised exactly
 * as for a web app. Skipped only when Chromium is absent outside CI; under CI=true a missing Chromium
 * fails the run (.ci/run installs it).
 */
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const ARTIFACTS = join(import.meta.dirname, "..", "..", "test-artifacts");
/** Flags that keep Chromium quiet on a closed network (no background calls, no GPU, no sandbox in CI). */
const CHROMIUM_FLAGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium) {
  // Skipped tests are easy to miss in a summary line: say it where nobody can overlook it.
  console.warn(
    `\n${"!".repeat(78)}\n!! BROWSER TESTS SKIPPED: no Chromium at ${CHROMIUM} (apt-get install -y chromium).\n` +
      `!! The receipt page and the API reference page were NOT looked at in a browser.\n${"!".repeat(78)}\n`,
  );
}

it("has Chromium, or is not under CI (where the browser tests must run)", () => {
  const ci = process.env.CI === "true";
  expect(haveChromium || !ci, `${CHROMIUM} is missing under CI: apt-get install -y chromium`).toBe(true);
});

/**
 * Modules the page bundle does without: the client's Node transports (the page passes a Connect web
 * transport instead) and the Node-only helpers receiptline loads for printer commands (SVG needs none).
 */
const browserStubs: Plugin = {
  name: "browser-stubs",
  setup(b) {
    b.onResolve(
      { filter: /^(@connectrpc\/connect-node|iconv-lite|pngjs|stream|string_decoder)$/ },
      (args) => ({
        path: args.path,
        namespace: "stub",
      }),
    );
    b.onLoad({ filter: /.*/, namespace: "stub" }, (args) => ({
      contents:
        args.path === "@connectrpc/connect-node"
          ? "const nodeOnly = () => { throw new Error('Node transports are not for browsers'); };\n" +
            "export const createConnectTransport = nodeOnly, createGrpcTransport = nodeOnly,\n" +
            "  createNodeHttpClient = nodeOnly, compressionBrotli = {}, compressionGzip = {};\n" +
            "export class Http2SessionManager { constructor() { nodeOnly(); } }"
          : "module.exports = {};",
      loader: "js",
    }));
  },
};

async function bundlePage(): Promise<string> {
  const result = await build({
    entryPoints: [join(import.meta.dirname, "page", "receipt-page.ts")],
    bundle: true,
    write: false,
    format: "esm",
    platform: "browser",
    target: "chrome120",
    plugins: [browserStubs],
    logLevel: "silent",
  });
  const [output] = result.outputFiles;
  if (output === undefined) throw new Error("esbuild produced no output");
  return output.text;
}

const PAGE_HTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Receipts in the browser</title>
<style>body{font-family:sans-serif;margin:24px;background:#eee} #receipt svg,#refund svg{background:#fff;box-shadow:0 2px 8px #999;margin:8px}</style>
</head><body>
<h1>My receipts</h1><p id="status">Loading...</p><div id="receipt"></div><div id="refund"></div>
<script type="module" src="/page.js"></script>
</body></html>`;

const skipBrowser = !haveChromium && process.env.CI !== "true";
// The reason is in the title, so the skip line of every reporter says why.
const BROWSER_TITLE = skipBrowser
  ? `in a real browser (Chromium) [SKIPPED: no Chromium at ${CHROMIUM}]`
  : "in a real browser (Chromium)";

describe.skipIf(skipBrowser)(BROWSER_TITLE, () => {
  let svc: TestService;
  let pageServer: Server;
  let pageOrigin: string;
  let context: BrowserContext;
  let profile: string;

  beforeAll(async () => {
    const script = await bundlePage();
    pageServer = createServer((req, res) => {
      if (req.url === "/page.js") {
        res.writeHead(200, { "content-type": "text/javascript" }).end(script);
      } else if (req.url === "/") {
        res.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(PAGE_HTML);
      } else {
        res.writeHead(404).end();
      }
    });
    await new Promise<void>((resolve) => pageServer.listen(0, "127.0.0.1", resolve));
    pageOrigin = `http://127.0.0.1:${(pageServer.address() as AddressInfo).port}`;
    svc = await startService({ env: { CORS_ORIGINS: pageOrigin } });
    profile = mkdtempSync(join(tmpdir(), "chromium-profile-"));
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_FLAGS,
      viewport: { width: 900, height: 1100 },
    });
    mkdirSync(ARTIFACTS, { recursive: true });
  }, 120_000);

  afterAll(async () => {
    await context?.close();
    await svc?.close();
    await new Promise((resolve) => pageServer?.close(resolve));
    if (profile) rmSync(profile, { recursive: true, force: true });
  });

  // RSA first, P-256 last: the screenshot kept is of the careful issuer's path.
  it.each(["RSA-OAEP-256", "HPKE-P256-SHA256-A256GCM"] as const)(
    "makes a non-extractable %s key, registers it, gets a receipt and its refund, opens and draws both",
    async (algorithm) => {
      const page = await context.newPage();
      const problems: string[] = [];
      page.on("pageerror", (err) => problems.push(err.message));
      await page.goto(`${pageOrigin}/`);
      await expect.poll(() => page.locator("#status").textContent()).toBe("Ready.");
      const config: FlowConfig = {
        baseUrl: svc.baseUrl,
        issuerKey: svc.issuerKey,
        merchantKey: svc.merchantKey,
        algorithm,
        suffix: crypto.randomUUID().slice(0, 8),
      };
      const result = await page.evaluate(
        (cfg) => (globalThis as unknown as { runFlow: (c: FlowConfig) => Promise<FlowResult> }).runFlow(cfg),
        config,
      );
      expect(problems).toEqual([]);
      expect(result.privateKeyExtractable).toBe(false);
      expect(result.exportRefused).toBe(true);
      expect(result.userId).toMatch(/^usr_/);
      expect(result.paymentId).toMatch(/^pay_/);
      expect(result.listed).toBe(2);
      expect(result.opened).toEqual({
        receiptId: `web-r-${config.suffix}`,
        merchantName: "Corner Coffee",
        items: ["Flat white", "Croissant"],
        currency: "EUR",
      });

      // The receipt image is on the page: what a person sees.
      const image = page.locator("#receipt svg");
      await expect.poll(() => image.isVisible()).toBe(true);
      const box = await image.boundingBox();
      expect(box?.height ?? 0).toBeGreaterThan(300);
      const shown = (await image.textContent())?.replace(/\u00a0/g, " ").replace(/\s+/g, " ") ?? "";
      for (const text of [
        "Corner Coffee",
        "Flat white x2",
        "Croissant",
        "TOTAL",
        "EUR 12.95",
        "VISA **** ",
      ]) {
        expect(shown, text).toContain(text);
      }
      // What the browser drew, line by line: the sale's tip, tenders and tax per rate, and the refund.
      const last4 = result.images.sale.lines.find((l) => l.startsWith("VISA **** "))?.slice(10, 14) ?? "";
      expect(result.images.sale.lines).toEqual(
        expect.arrayContaining([
          "Tip 1.50",
          "TOTAL EUR 12.95",
          "Paid with",
          "gift card 2.95",
          `VISA **** ${last4} 10.00`,
          "Tax rate Net Tax",
          "23% 7.00 1.61",
          "13.5% 2.50 0.34",
          "Statement CORNER COFFEE DUBLIN",
          "Auth code A1B2C3",
        ]),
      );
      const refund = result.images.refund.lines;
      expect(refund.slice(refund.indexOf("REFUND"), refund.indexOf("REFUND") + 2)).toEqual([
        "REFUND",
        `of receipt web-r-${config.suffix}`,
      ]);
      expect(refund).toEqual(expect.arrayContaining(["TOTAL EUR -2.50", `VISA **** ${last4} 2.50`]));
      expect(result.images.sale.lines).not.toContain("REFUND");
      // The pixels: the REFUND banner is drawn inverted (mostly dark: 77% when measured), the plain
      // lines are not (16-17%), the sale's bold TOTAL line neither.
      expect(result.images.refund.dark.banner).toBeGreaterThan(0.5);
      expect(result.images.refund.dark.plain).toBeLessThan(0.3);
      expect(result.images.sale.dark.banner).toBeLessThan(0.3);
      expect(await page.locator("#status").textContent()).toContain("extractable: false");
      await page.screenshot({ path: join(ARTIFACTS, "browser-receipt.png"), fullPage: true });
      await page.close();
    },
  );

  it("shows the API reference at /docs: every operation with a description and an example", async () => {
    const admin = await startService({ env: { ADMIN_TOKEN: "browser-test-admin-token-0123456789abcdef" } });
    try {
      const doc = (await (await fetch(`${admin.baseUrl}/openapi.json`)).json()) as {
        paths: Record<string, Record<string, { operationId: string }>>;
      };
      const ids = Object.values(doc.paths).flatMap((item) => Object.values(item).map((op) => op.operationId));
      const page = await context.newPage();
      await page.setViewportSize({ width: 1280, height: 900 });
      const requests: string[] = [];
      page.on("request", (request) => requests.push(request.url()));
      await page.goto(`${admin.baseUrl}/docs`);
      expect(await page.locator("header .product").textContent()).toBe("Receipt Encryption Service");
      // As a reader sees it: the rendered text (innerText), not the HTML source. No DOM types here
      // (the project's TypeScript setup has none): the elements are read through this small shape.
      type Shown = { offsetHeight: number; innerText: string; getAttribute(name: string): string | null };
      type Article = Shown & { querySelector(selector: string): Shown | null };
      const shown = await page.locator("article.operation").evaluateAll((elements) =>
        (elements as unknown as Article[]).map((a) => {
          // innerText on purpose: the text as rendered (hidden text has none), what a reader sees.
          const seen = (selector: string) =>
            // biome-ignore lint/performance/useDomNodeTextContent: the rendered text is the point
            a.querySelector(selector)?.innerText.trim() ?? "";
          return {
            id: a.getAttribute("data-operation-id") ?? "",
            visible: a.offsetHeight > 0,
            description: seen(".description"),
            request: seen(".example-request"),
            response: seen(".example-response"),
          };
        }),
      );
      expect(shown.map((o) => o.id).sort()).toEqual([...ids].sort());
      for (const op of shown) {
        expect(op.visible, op.id).toBe(true);
        expect(op.description.length, `${op.id}: description`).toBeGreaterThan(20);
        expect(op.request, `${op.id}: example request`).toMatch(/^curl /);
        expect(op.response.length, `${op.id}: example response`).toBeGreaterThan(10);
      }
      expect(shown.map((o) => o.id)).toContain("Operator_PostApiKeys");
      expect(await page.getByRole("heading", { name: /zero-knowledge path/ }).isVisible()).toBe(true);
      // Nothing but the page itself was loaded: no script, font or style from anywhere.
      expect(requests).toEqual([`${admin.baseUrl}/docs`]);
      mkdirSync(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: join(ARTIFACTS, "docs.png") });
      await page.locator("#op-ReceiptsService_EncryptReceipt").scrollIntoViewIfNeeded();
      await page.screenshot({ path: join(ARTIFACTS, "docs-operation.png") });
      // Narrow, as on a phone: the sidebar gives way and nothing runs off the right edge.
      await page.setViewportSize({ width: 420, height: 900 });
      const overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth");
      expect(overflow).toBeLessThanOrEqual(0);
      await page.close();
    } finally {
      await admin.close();
    }
  });
});
