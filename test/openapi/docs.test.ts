import type { JsonObject } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { escapeHtml, inline, markdown } from "../../src/openapi/reference/markdown.js";
import { startService, type TestService } from "../support/harness.js";

/**
 * The API reference page at /docs, as served: the service's own page rendered from its OpenAPI
 * document. test/browser/browser.test.ts looks at it in Chromium as a person does.
 */

const ADMIN_TOKEN = "docs-test-admin-token-0123456789abcdef";

/** Every operation of a document as `id`, with its verb and path. */
function operationIds(doc: { paths: Record<string, JsonObject> }): string[] {
  return Object.values(doc.paths).flatMap((item) =>
    Object.values(item).map((op) => String((op as JsonObject).operationId)),
  );
}

describe("API reference page at /docs", () => {
  let svc: TestService;
  let admin: TestService;
  beforeAll(async () => {
    svc = await startService();
    admin = await startService({ env: { ADMIN_TOKEN } });
  });
  afterAll(async () => {
    await svc?.close();
    await admin?.close();
  });

  it("is one HTML page under the product's name that loads nothing: no script, no asset, no other host", async () => {
    const res = await fetch(`${svc.baseUrl}/docs`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    expect(res.headers.get("x-ratelimit-limit")).toBeNull();
    const html = await res.text();
    expect(html).toContain("<title>API reference - Receipt Encryption Service</title>");
    expect(html).not.toMatch(/<script|<link|<img|src=/i);
    expect(html.toLowerCase()).not.toContain("swagger");
    const external = [...html.matchAll(/href="([^"]+)"/g)].map((m) => m[1] ?? "");
    for (const href of external) expect(href, href).toMatch(/^(#|\/(?!\/))/);
  });

  it("has one section per operation of /openapi.json, with its description and examples", async () => {
    const doc = (await (await fetch(`${svc.baseUrl}/openapi.json`)).json()) as {
      paths: Record<string, JsonObject>;
    };
    const html = await (await fetch(`${svc.baseUrl}/docs`)).text();
    const ids = operationIds(doc);
    expect(ids.length).toBeGreaterThan(15);
    for (const id of ids) {
      const start = html.indexOf(`data-operation-id="${id}"`);
      expect(start, id).toBeGreaterThan(0);
      const article = html.slice(start, html.indexOf("</article>", start));
      expect(article, id).toMatch(/<div class="description"><p>[^<]/);
      expect(article, id).toMatch(/<pre class="example example-request"><code>curl /);
      expect(article, id).toMatch(/<pre class="example example-response"><code>\S/);
    }
  });

  it("shows the guide, required fields, roles and each operation's error codes linked to /docs/errors", async () => {
    const html = await (await fetch(`${svc.baseUrl}/docs`)).text();
    expect(html).toContain("The zero-knowledge path: receipts the service never reads");
    expect(html).toContain("Authentication and roles");
    const decrypt = html.slice(html.indexOf('data-operation-id="ReceiptsService_DecryptReceipt"'));
    const article = decrypt.slice(0, decrypt.indexOf("</article>"));
    expect(article).toContain('<code>privateKey</code><span class="badge">required</span>');
    expect(article).not.toContain('<code>merchantId</code><span class="badge">required</span>');
    expect(article).toContain("Needs an API key of role <code>issuer</code>.");
    expect(article).toContain('<a href="/docs/errors#not_found"><code>not_found</code></a>');
    expect(article.includes("-H &quot;X-API-Key: $ISSUER_KEY&quot;"), "the issuer's key in curl").toBe(true);
  });

  it("documents the operator API only when the server serves it (ADMIN_TOKEN)", async () => {
    const without = await (await fetch(`${svc.baseUrl}/docs`)).text();
    expect(without.includes("/admin/v1/api-keys"), "no operator API without ADMIN_TOKEN").toBe(false);
    const plain = (await (await fetch(`${svc.baseUrl}/openapi.json`)).json()) as { paths: object };
    expect(Object.keys(plain.paths).some((p) => p.startsWith("/admin"))).toBe(false);

    const withAdmin = await (await fetch(`${admin.baseUrl}/docs`)).text();
    expect(withAdmin.includes('<code class="path">/admin/v1/api-keys</code>'), "operator API").toBe(true);
    expect(withAdmin.includes("-H &quot;Authorization: Bearer $ADMIN_TOKEN&quot;"), "bearer in curl").toBe(
      true,
    );
    const doc = (await (await fetch(`${admin.baseUrl}/openapi.json`)).json()) as JsonObject & {
      paths: Record<string, JsonObject>;
      components: JsonObject;
    };
    expect(Object.keys(doc.paths)).toContain("/admin/v1/issuers/{tenant}/bins");
    expect((doc.components.securitySchemes as JsonObject).adminToken).toMatchObject({
      type: "http",
      scheme: "bearer",
    });
    // The token itself appears nowhere.
    expect(withAdmin.includes(ADMIN_TOKEN), "the token on the page").toBe(false);
    expect(JSON.stringify(doc)).not.toContain(ADMIN_TOKEN);
  });
});

describe("the page's Markdown", () => {
  it("escapes everything it does not format", () => {
    expect(inline('<script>alert(1)</script> & "q"')).toBe(
      "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;q&quot;",
    );
    expect(inline("`<b>` and **bold** and *em*")).toBe(
      "<code>&lt;b&gt;</code> and <strong>bold</strong> and <em>em</em>",
    );
    expect(escapeHtml("'")).toBe("&#39;");
  });

  it("links only relative and http(s) targets", () => {
    expect(inline("[errors](/docs/errors)")).toBe('<a href="/docs/errors">errors</a>');
    expect(inline("[x](javascript:alert(1))")).not.toContain("<a ");
    expect(inline("[x](//evil.example)")).not.toContain("<a ");
  });

  it("renders headings, lists with continuation lines, tables and paragraphs", () => {
    const html = markdown(
      "## Title\n\n- one\n  more\n- two\n\n1. first\n2. second\n\n| a | b |\n|---|---|\n| `x` | y |\n\ntext\nwraps",
    );
    expect(html).toBe(
      [
        "<h2>Title</h2>",
        "<ul><li>one more</li><li>two</li></ul>",
        "<ol><li>first</li><li>second</li></ol>",
        "<table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td><code>x</code></td><td>y</td></tr></tbody></table>",
        "<p>text wraps</p>",
      ].join("\n"),
    );
  });
});
