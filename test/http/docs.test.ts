import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startService, type TestService } from "../support/harness.js";

describe("API reference page at /docs", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(() => svc.close());

  it("serves an HTML page without an API key, loading only its own assets", async () => {
    const res = await fetch(`${svc.baseUrl}/docs`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    const html = await res.text();
    expect(html).toContain('id="swagger-ui"');
    const assets = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1] ?? "");
    expect(assets.length).toBeGreaterThan(2);
    // Nothing from another host: the page must work with no network.
    for (const asset of assets) expect(asset, asset).not.toMatch(/^(https?:)?\/\//);
    for (const asset of assets) {
      const url = new URL(asset, `${svc.baseUrl}/docs/`);
      const got = await fetch(url);
      expect(got.status, url.pathname).toBe(200);
      expect((await got.arrayBuffer()).byteLength, url.pathname).toBeGreaterThan(0);
    }
  });

  it("ships the Swagger UI bundle and points it at the service's OpenAPI document", async () => {
    const bundle = await fetch(`${svc.baseUrl}/docs/static/swagger-ui-bundle.js`);
    expect(bundle.status).toBe(200);
    expect(bundle.headers.get("content-type")).toMatch(/javascript/);
    expect((await bundle.text()).length).toBeGreaterThan(100_000);
    const init = await (await fetch(`${svc.baseUrl}/docs/static/swagger-initializer.js`)).text();
    expect(init).toContain("resolveUrl('./json')");
    const served = (await (await fetch(`${svc.baseUrl}/docs/json`)).json()) as { paths: object };
    const document = await (await fetch(`${svc.baseUrl}/openapi.json`)).json();
    expect(served).toEqual(document);
    expect(Object.keys(served.paths)).toContain("/api/v1/onboarding/generate-keys");
  });

  it("carries no rate-limit headers and needs no key, like the OpenAPI document", async () => {
    const res = await fetch(`${svc.baseUrl}/docs/json`);
    expect(res.status).toBe(200);
    expect(res.headers.get("x-ratelimit-limit")).toBeNull();
  });
});
