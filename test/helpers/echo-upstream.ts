/**
 * A hostile upstream for the response-side attack tests: a real HTTP server on an
 * ephemeral port that echoes the credentials it receives back to the caller in every way
 * a careless or hostile API might (response headers, text, JSON under innocuous names,
 * base64, URL-encoded, UTF-16, binary, compressed, and in every encoding a client may decode:
 * MIME base64, HTML references, percent-encoding, JavaScript escapes, hex, quoted-printable,
 * and these nested), and that serves sensitive JSON the way a redaction bypass would need it
 * (BOM, NDJSON, trailing bytes, NaN, UTF-16, JSONP, gzip, an unknown content coding, HTML,
 * JSON inside a JSON string or a base64 one, JSON under a text type).
 *
 *   GET /echo/{kind}   → ECHO_KINDS: what it received, spelled as `kind` says
 *   GET /ruled/{kind}  → BODY_KINDS: `{ card_number, password }` served as `kind` says
 *   GET /plain/{kind}  → BODY_KINDS too (an operation without rules)
 *
 * `hostileOpenApi(prefix)` is its OpenAPI document; `/ruled/{kind}` carries an operation
 * rule masking `/card_number` (keep 4).
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { gzipSync } from "node:zlib";
import {
  htmlDecimal,
  htmlHex,
  htmlNamed,
  jsEscaped,
  mimeBase64,
  mixedHex,
  percentAll,
  quotedPrintable,
  spaced,
} from "./client-encodings.ts";

export { clientReadings } from "./client-encodings.ts";

export const ECHO_KINDS = [
  "header",
  "text",
  "json",
  "json-escaped",
  "utf16-escaped",
  "base64",
  "urlencoded",
  "utf16",
  "binary",
  "gzip",
  "location",
  // Encodings a client may decode (issue 26): every one must be scrubbed or refused.
  "base64-mime",
  "base64-json-lines",
  "base64url-spaced",
  "html-decimal",
  "html-hex",
  "html-named",
  "percent-all",
  "js-escaped",
  "hex",
  "quoted-printable",
  "utf16-percent",
  "gzip-base64-mime",
  "percent-html",
  "base64-js-escaped",
] as const;
export type EchoKind = (typeof ECHO_KINDS)[number];

export const BODY_KINDS = [
  "json",
  "bom",
  "ndjson",
  "trailing",
  "nan",
  "utf16",
  "utf16-charset",
  "jsonp",
  "gzip",
  "unknown-encoding",
  "html",
  // JSON inside what is not plain JSON (issue 26): masked where a client would read it, or refused.
  "html-escaped",
  "jsonp-unquoted",
  "json-in-string",
  "json-base64-string",
  "json-text-plain",
  "html-clean",
] as const;
export type BodyKind = (typeof BODY_KINDS)[number];

export const CARD_NUMBER = "4111111111111111";

export interface EchoHit {
  readonly path: string;
  readonly query: string;
  readonly headers: IncomingHttpHeaders;
}

export interface EchoUpstream {
  readonly url: string;
  readonly hits: EchoHit[];
  /** The `password` value the sensitive bodies carry (set it to a canary). */
  password: string;
  close(): Promise<void>;
}

export function hostileOpenApi(prefix: string): Record<string, unknown> {
  const kind = (values: readonly string[]) => [
    { name: "kind", in: "path", required: true, schema: { type: "string", enum: [...values] } },
  ];
  const ok = { "200": { description: "whatever the upstream sends" } };
  return {
    openapi: "3.1.0",
    info: { title: "Hostile", version: "1.0.0" },
    paths: {
      "/echo/{kind}": { get: { operationId: `${prefix}Echo`, parameters: kind(ECHO_KINDS), responses: ok } },
      "/plain/{kind}": {
        get: { operationId: `${prefix}Plain`, parameters: kind(BODY_KINDS), responses: ok },
      },
      "/ruled/{kind}": {
        get: {
          operationId: `${prefix}Ruled`,
          parameters: kind(BODY_KINDS),
          responses: ok,
          "x-authority-redactions": [{ path: "/card_number", mode: "mask", keep_last: 4 }],
        },
      },
    },
  };
}

/** Everything the upstream received that could be a credential: header values and the query. */
function received(headers: IncomingHttpHeaders, query: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) out[name] = Array.isArray(value) ? value.join(", ") : value;
  }
  out.query = query;
  return out;
}

function dump(values: Record<string, string>): string {
  return Object.entries(values)
    .map(([name, value]) => `${name}: ${value}`)
    .join("\n");
}

/** Every character as a \u escape: a byte scan cannot see it, a JSON parser does. */
function escapeAll(text: string): string {
  return Array.from(text, (c) => `\\u${(c.codePointAt(0) ?? 0).toString(16).padStart(4, "0")}`).join("");
}

/** Returns undefined so that `return send(…)` ends a case. */
function send(res: ServerResponse, headers: Record<string, string>, body: Buffer | string): undefined {
  const bytes = typeof body === "string" ? Buffer.from(body, "utf8") : body;
  res.writeHead(200, { ...headers, "content-length": String(bytes.length) });
  res.end(bytes);
  return undefined;
}

function echo(kind: string, values: Record<string, string>, res: ServerResponse): undefined {
  const text = dump(values);
  switch (kind) {
    case "header": {
      const headers: Record<string, string> = { "content-type": "application/json" };
      for (const [name, value] of Object.entries(values)) headers[`x-echo-${name}`] = value;
      return send(res, headers, '{"ok":true}');
    }
    case "location":
      res.writeHead(302, {
        location: `https://elsewhere.example/next?${values.query?.slice(1) ?? ""}&auth=${encodeURIComponent(values.authorization ?? "")}`,
        "content-length": "0",
      });
      return void res.end();
    case "text":
      return send(res, { "content-type": "text/plain" }, `You sent:\n${text}\n`);
    case "json":
      // Innocuous names: nothing on the sensitive-field list.
      return send(
        res,
        { "content-type": "application/json" },
        JSON.stringify({ received: values, debug: { note: `echo of ${Object.values(values).join(" | ")}` } }),
      );
    case "json-escaped": {
      const fields = Object.entries(values).map(([name, value]) => `"${name}":"${escapeAll(value)}"`);
      return send(res, { "content-type": "application/json" }, `{"received":{${fields.join(",")}}}`);
    }
    case "utf16-escaped": {
      // \u escapes in UTF-16: neither a byte scan nor a UTF-8 look at the text sees them.
      const fields = Object.entries(values).map(([name, value]) => `"${name}":"${escapeAll(value)}"`);
      const json = `{"received":{${fields.join(",")}}}`;
      return send(
        res,
        { "content-type": "application/json" },
        Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(json, "utf16le")]),
      );
    }
    case "base64":
      return send(
        res,
        { "content-type": "application/json" },
        JSON.stringify({ blob: Buffer.from(JSON.stringify(values)).toString("base64"), id: 7 }),
      );
    case "urlencoded": {
      const links = Object.entries(values).map(
        ([name, value]) => `<a href="/next?${name}=${encodeURIComponent(value)}">${name}</a>`,
      );
      return send(res, { "content-type": "text/html" }, `<html><body>${links.join("\n")}</body></html>`);
    }
    case "utf16":
      return send(
        res,
        { "content-type": "text/plain; charset=utf-16le" },
        Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(text, "utf16le")]),
      );
    case "binary":
      return send(
        res,
        { "content-type": "application/octet-stream" },
        // A PNG signature first: random bytes starting with "{" or "[" would sniff as JSON (and be
        // refused as unredactable), which is right for such a body but not what this case tests.
        Buffer.concat([PNG_SIGNATURE, randomBytes(300), Buffer.from(text), randomBytes(300)]),
      );
    case "gzip":
      return send(res, { "content-type": "text/plain", "content-encoding": "gzip" }, gzipSync(text));
    case "base64-mime":
      return send(res, { "content-type": "text/plain" }, `${mimeBase64(Buffer.from(text))}\r\n`);
    case "base64-json-lines":
      return send(
        res,
        { "content-type": "application/json" },
        JSON.stringify({ blob: mimeBase64(Buffer.from(text), 64), id: 7 }),
      );
    case "base64url-spaced":
      // One byte first: the values start at another alignment than the blob.
      return send(
        res,
        { "content-type": "text/plain" },
        spaced(spaced(Buffer.from(`!${text}`).toString("base64url"), 5, " "), 23, "\n"),
      );
    case "html-decimal":
      return send(res, { "content-type": "text/html" }, `<html><pre>${htmlDecimal(text)}</pre></html>`);
    case "html-hex":
      return send(res, { "content-type": "text/html" }, `<html><pre>${htmlHex(text)}</pre></html>`);
    case "html-named":
      return send(res, { "content-type": "text/html" }, `<html><pre>${htmlNamed(text)}</pre></html>`);
    case "percent-all":
      return send(res, { "content-type": "text/plain" }, `next=${percentAll(text)}`);
    case "js-escaped":
      return send(res, { "content-type": "application/javascript" }, `var echo = "${jsEscaped(text)}";`);
    case "hex":
      return send(
        res,
        { "content-type": "text/plain" },
        `hex: ${Array.from(Buffer.from(text), (byte, i) => mixedHex(byte, i)).join("")}`,
      );
    case "quoted-printable":
      return send(res, { "content-type": "text/plain" }, quotedPrintable(text));
    case "utf16-percent":
      return send(
        res,
        { "content-type": "text/plain; charset=utf-16le" },
        Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(percentAll(text), "utf16le")]),
      );
    case "gzip-base64-mime":
      return send(
        res,
        { "content-type": "text/plain", "content-encoding": "gzip" },
        gzipSync(mimeBase64(Buffer.from(text))),
      );
    case "percent-html":
      return send(res, { "content-type": "text/plain" }, `next=${encodeURIComponent(htmlHex(text))}`);
    case "base64-js-escaped":
      return send(
        res,
        { "content-type": "application/json" },
        JSON.stringify({ blob: Buffer.from(jsEscaped(text)).toString("base64"), id: 7 }),
      );
    default:
      res.writeHead(404, { "content-length": "0" });
      return void res.end();
  }
}

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

function sensitive(kind: string, password: string, res: ServerResponse): undefined {
  const doc = { id: "order-1", card_number: CARD_NUMBER, password };
  const json = JSON.stringify(doc);
  switch (kind) {
    case "json":
      return send(res, { "content-type": "application/json" }, json);
    case "bom":
      return send(
        res,
        { "content-type": "application/json" },
        Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(json)]),
      );
    case "ndjson":
      return send(res, { "content-type": "application/x-ndjson" }, `${json}\n${json}\n`);
    case "trailing":
      return send(res, { "content-type": "application/json" }, `${json} <!-- trailing -->`);
    case "nan":
      return send(res, { "content-type": "application/json" }, `{"total":NaN,${json.slice(1)}`);
    case "utf16":
      return send(
        res,
        { "content-type": "application/json" },
        Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(json, "utf16le")]),
      );
    case "utf16-charset":
      return send(
        res,
        { "content-type": "text/plain; charset=utf-16be" },
        Buffer.from(json, "utf16le").swap16(),
      );
    case "jsonp":
      return send(res, { "content-type": "application/javascript" }, `callback(${json});`);
    case "gzip":
      return send(res, { "content-type": "application/json", "content-encoding": "gzip" }, gzipSync(json));
    case "unknown-encoding":
      return send(res, { "content-type": "application/json", "content-encoding": "x-secret-sauce" }, json);
    case "html":
      return send(res, { "content-type": "text/html" }, `<html><pre>${json}</pre></html>`);
    case "html-escaped":
      return send(
        res,
        { "content-type": "text/html" },
        `<html><pre>${json.replaceAll("&", "&amp;").replaceAll('"', "&quot;")}</pre></html>`,
      );
    case "jsonp-unquoted":
      return send(
        res,
        { "content-type": "application/javascript" },
        `cb({id:"order-1", card_number:"${CARD_NUMBER}", password:${JSON.stringify(password)}});`,
      );
    case "json-in-string":
      return send(
        res,
        { "content-type": "application/json" },
        JSON.stringify({ id: "order-1", payload: json }),
      );
    case "json-base64-string":
      return send(
        res,
        { "content-type": "application/json" },
        JSON.stringify({ id: "order-1", payload: Buffer.from(json).toString("base64") }),
      );
    case "json-text-plain":
      return send(res, { "content-type": "text/plain" }, json);
    case "html-clean":
      return send(
        res,
        { "content-type": "text/html" },
        "<html><body><p>order-1 has shipped</p></body></html>",
      );
    default:
      res.writeHead(404, { "content-length": "0" });
      return void res.end();
  }
}

export async function startEchoUpstream(): Promise<EchoUpstream> {
  const hits: EchoHit[] = [];
  const state = { password: "not-set" };
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const url = new URL(req.url ?? "/", "http://upstream");
      hits.push({ path: url.pathname, query: url.search, headers: req.headers });
      const [, group, kind = ""] = url.pathname.split("/");
      if (group === "echo") return echo(kind, received(req.headers, url.search), res);
      if (group === "ruled" || group === "plain") return sensitive(kind, state.password, res);
      res.writeHead(404, { "content-length": "0" });
      res.end();
    });
  });
  server.keepAliveTimeout = 5000;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    hits,
    get password() {
      return state.password;
    },
    set password(value: string) {
      state.password = value;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
