/**
 * Response conformance against a server's own OpenAPI document: a test harness attaches this
 * to its fastify app before the app is ready; every JSON response the existing integration
 * flows provoke is validated (ajv, JSON Schema 2020-12) against the document's schema for its
 * route and status, and the harness's close() fails on the first mismatch.
 */

import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import type { FastifyInstance } from "fastify";

type Document = {
  paths?: Record<string, Record<string, { responses?: Record<string, { content?: unknown }> }>>;
};

const pointerEscape = (segment: string) => segment.replaceAll("~", "~0").replaceAll("/", "~1");

/** fastify's `/v1/x/:id` is the document's `/v1/x/{id}`. */
export const openApiPath = (url: string) => url.replace(/:([A-Za-z0-9_]+)/g, "{$1}");

export interface Conformance {
  /** "METHOD url status" of every response checked. */
  readonly checked: Set<string>;
  readonly mismatches: string[];
  assertConforming(): void;
}

export function checkResponsesAgainstDocument(app: FastifyInstance): Conformance {
  const checked = new Set<string>();
  const mismatches: string[] = [];
  let ajv: Ajv2020 | undefined;
  let document: Document | undefined;
  const validators = new Map<string, ValidateFunction>();

  const responseSchemaRef = (method: string, url: string, status: number): string | undefined => {
    document ??= app.swagger() as Document;
    const path = openApiPath(url);
    const operation = document.paths?.[path]?.[method.toLowerCase()];
    if (operation === undefined) return undefined;
    const responses = operation.responses ?? {};
    const key = [String(status), `${String(status)[0]}XX`, "default"].find((k) => responses[k] !== undefined);
    if (key === undefined) return undefined;
    const media = (responses[key]?.content as Record<string, { schema?: unknown }> | undefined) ?? {};
    const type = Object.keys(media).find((t) => media[t]?.schema !== undefined);
    if (type === undefined) return "";
    return `openapi.json#/paths/${pointerEscape(path)}/${method.toLowerCase()}/responses/${key}/content/${pointerEscape(type)}/schema`;
  };

  app.addHook("onSend", async (request, reply, payload) => {
    const url = request.routeOptions.url;
    const type = String(reply.getHeader("content-type") ?? "");
    if (url === undefined || typeof payload !== "string" || !/json/.test(type)) return payload;
    const label = `${request.method} ${url} ${reply.statusCode}`;
    const ref = responseSchemaRef(request.method, url, reply.statusCode);
    if (ref === undefined) {
      mismatches.push(`${label}: status not in the document`);
      return payload;
    }
    checked.add(label);
    if (ref === "") return payload;
    if (ajv === undefined) {
      ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
      ajv.addSchema(document as object, "openapi.json");
    }
    let validate = validators.get(ref);
    if (validate === undefined) {
      validate = ajv.compile({ $ref: ref });
      validators.set(ref, validate);
    }
    let body: unknown;
    try {
      body = JSON.parse(payload);
    } catch {
      mismatches.push(`${label}: body is not JSON`);
      return payload;
    }
    if (!validate(body)) {
      mismatches.push(`${label}: ${ajv.errorsText(validate.errors)} in ${payload.slice(0, 400)}`);
    }
    return payload;
  });

  return {
    checked,
    mismatches,
    assertConforming() {
      if (mismatches.length > 0) {
        throw new Error(`responses do not match the OpenAPI document:\n${mismatches.join("\n")}`);
      }
    },
  };
}

/** "METHOD /path" of every route fastify registered, read from `app.printRoutes()` (HEAD left out). */
export function registeredRoutes(app: FastifyInstance): string[] {
  const routes: string[] = [];
  const stack: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split("\n")) {
    const match = /^([│ ]*)[├└]── (\S+?)(?: \(([A-Z, ]+)\))?$/.exec(line.trimEnd());
    if (match === null) continue;
    const depth = (match[1] ?? "").length / 4;
    stack.length = depth;
    stack.push(match[2] ?? "");
    for (const method of (match[3] ?? "").split(", ").filter((m) => m !== "" && m !== "HEAD")) {
      routes.push(`${method} ${stack.join("")}`);
    }
  }
  return routes.sort();
}

/** "METHOD /path" of every operation the document lists. */
export function documentedOperations(document: Document): string[] {
  const methods = ["get", "put", "post", "delete", "patch", "options", "head"];
  return Object.entries(document.paths ?? {})
    .flatMap(([path, item]) =>
      Object.keys(item)
        .filter((m) => methods.includes(m))
        .map((m) => `${m.toUpperCase()} ${path}`),
    )
    .sort();
}

/** Operations that declare no response of their own (only the error bodies every route has). */
export function operationsWithoutSuccessSchema(document: Document): string[] {
  return documentedOperations(document).filter((operation) => {
    const [method = "", path = ""] = operation.split(" ");
    const responses = document.paths?.[path]?.[method.toLowerCase()]?.responses ?? {};
    return Object.keys(responses).every((status) => status === "4XX" || status === "5XX");
  });
}
