import type { FastifyInstance } from "fastify";
import type { OpenApiDocument } from "./openapi.js";
import { referencePage } from "./reference/page.js";

/** Where the API reference page is served. */
export const DOCS_PREFIX = "/docs";

/**
 * Serves the API reference page at `/docs`: our own page rendered once, at start-up, from `document`,
 * the OpenAPI document also served at `/openapi.json` (see `reference/page.ts`). It loads nothing
 * from anywhere and needs no API key, like the document.
 */
export function registerApiReference(app: FastifyInstance, document: OpenApiDocument): void {
  const page = referencePage(document);
  app.get(DOCS_PREFIX, async (_request, reply) => reply.type("text/html; charset=utf-8").send(page));
}
