import fastifySwagger, { type StaticDocumentSpec } from "@fastify/swagger";
import fastifySwaggerUi from "@fastify/swagger-ui";
import type { FastifyInstance } from "fastify";

/** Where the API reference page is served; its assets live under `<prefix>/static/`. */
export const DOCS_PREFIX = "/docs";

/**
 * Serves an API reference page at `/docs`: Swagger UI (@fastify/swagger-ui) rendering `document`, the
 * OpenAPI document also served at `/openapi.json`. Its scripts and styles ship in the package and are
 * served from here, so the page works with no network. @fastify/swagger-ui requires @fastify/swagger,
 * which in its `static` mode only hands over the given document (it collects no routes). Like the
 * OpenAPI document, the page needs no API key; "Try it out" calls send the key the reader enters.
 */
export async function registerApiReference(app: FastifyInstance, document: object): Promise<void> {
  // Our builder types its own document; the plugin only serves it back, so its OpenAPI type is a view.
  const specification = { document: document } as StaticDocumentSpec;
  await app.register(fastifySwagger, { mode: "static", specification });
  await app.register(fastifySwaggerUi, {
    routePrefix: DOCS_PREFIX,
    // No call to validator.swagger.io: the page must not reach out of the service.
    validatorUrl: false,
    uiConfig: { deepLinking: true, docExpansion: "list", tryItOutEnabled: false },
  });
}
