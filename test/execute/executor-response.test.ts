/**
 * The executor's response side against a hostile upstream: every secret of the auth
 * profile it used — static key, OAuth access token (also a renewed one), client secret and
 * its client_secret_basic header, a user grant's refresh token — is scrubbed from what the
 * upstream sends back; what cannot be scrubbed or redacted is refused after the call
 * (`upstreamError.kind: "unusable"`, so invoke keeps the outcome); a secret too short to
 * scrub refuses the call before anything is sent.
 */

import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";
import { brotliCompressSync, deflateRawSync, deflateSync, gzipSync } from "node:zlib";
import type { AuthProfile } from "../../src/execute/auth-profiles.ts";
import { ExecutionError } from "../../src/execute/errors.ts";
import { userGrantKey } from "../../src/execute/token-set-store.ts";
import { canary } from "../helpers/canary.ts";
import { egressAllowing } from "../helpers/egress.ts";
import { type ExecuteRequest, executeOnce, testExecutor } from "../helpers/execute-once.ts";
import {
  itemSnapshot,
  openTokenStore,
  type Recorded,
  secretTable,
  startServer,
  type TestServer,
  type TokenStoreFixture,
} from "./helpers.ts";
import { type OAuthServer, startOAuthServer } from "./oauth-server.ts";

const CLIENT_ID = "items-client";
const CLIENT_SECRET = canary("cs-");
const API_KEY = canary("key-");

let upstream: TestServer;
let oauth: OAuthServer;
let tokens: TokenStoreFixture;
/** Strings the hostile upstream "knows" and adds to every echo. */
let known: string[];

function echoAll(req: Recorded): string {
  return [req.target, ...Object.values(req.headers).map(String), ...known].join("\n");
}

before(async () => {
  upstream = await startServer();
  oauth = await startOAuthServer({ clients: { [CLIENT_ID]: CLIENT_SECRET } });
  tokens = await openTokenStore();
});
after(async () => {
  await upstream.close();
  await oauth.close();
  await tokens.close();
});
beforeEach(() => {
  upstream.requests.length = 0;
  known = [];
  upstream.setHandler((req, res) => {
    const text = echoAll(req);
    res.writeHead(200, {
      "content-type": "application/json",
      "x-debug-received": text.replaceAll("\n", " | "),
    });
    res.end(JSON.stringify({ received: text, blob: Buffer.from(text).toString("base64") }));
  });
});

function executor(secrets: Record<string, string> = { "ref:key": API_KEY, "ref:cs": CLIENT_SECRET }) {
  return testExecutor({
    secretResolver: secretTable(secrets).resolve,
    tokenSetStore: tokens.tokenSetStore,
    constraintsRollout: { enabled: true, isPartnerAllowlisted: () => true },
    egress: egressAllowing([upstream.origin, oauth.origin]),
  });
}

/** An API key in the `x-api-key` header, from `ref:key`. */
const HEADER_KEY: AuthProfile = {
  type: "static",
  id: "k",
  kind: "api_key",
  in: "header",
  name: "x-api-key",
  secretRef: "ref:key",
};

const clientCredentials: AuthProfile = {
  type: "oauth_client_credentials",
  id: "cc",
  tokenUrl: "",
  clientId: CLIENT_ID,
  clientSecretRef: "ref:cs",
  scopes: ["items.read"],
};

function request(authProfile: AuthProfile, overrides: Partial<ExecuteRequest> = {}): ExecuteRequest {
  return {
    snapshot: itemSnapshot(upstream.origin),
    args: { path: { id: "item-1" } },
    authProfile,
    partnerId: "acme",
    ...overrides,
  };
}

function assertAbsent(result: unknown, secrets: readonly string[]): void {
  const text = JSON.stringify(result);
  for (const secret of secrets) {
    assert.equal(text.includes(secret), false, `a secret of ${secret.length} characters came back`);
    for (const blob of text.match(/[A-Za-z0-9+/]{40,}={0,2}/g) ?? []) {
      assert.equal(Buffer.from(blob, "base64").toString("latin1").includes(secret), false, "base64 echo");
    }
  }
}

async function rejection(promise: Promise<unknown>): Promise<ExecutionError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ExecutionError, String(error));
    return error;
  }
  assert.fail("expected an ExecutionError");
}

describe("executor: injected secrets never reach the caller", () => {
  it("client credentials: the access token, the client secret and its Basic header are scrubbed", async () => {
    const profile = { ...clientCredentials, tokenUrl: `${oauth.origin}/token` };
    const run = executor();
    const first = await executeOnce(run, request(profile));
    const basic = oauth.lastAuthorization ?? "";
    assert.ok(basic.startsWith("Basic "));
    // The upstream is also the token server here: it knows the client secret and the Basic header.
    known = [CLIENT_SECRET, basic, `${CLIENT_ID}:${CLIENT_SECRET}`];
    const result = await executeOnce(run, request(profile));
    const sent = upstream.requests.at(-1)?.headers.authorization ?? "";
    assert.match(sent, /^Bearer at-/);
    assertAbsent([first, result], [sent, sent.slice(7), CLIENT_SECRET, basic]);
    assert.equal(result.headers["x-debug-received"], undefined, "the echoing header is dropped");
    assert.ok(result.redactionEvents.some((e) => e.source === "secret" && e.path === "x-debug-received"));
    assert.ok(result.redactionEvents.some((e) => e.source === "secret" && e.path === ""));
  });

  it("a token renewed after a 401: both the refused and the new token are scrubbed", async () => {
    const profile = {
      ...clientCredentials,
      id: "cc-renew",
      scopes: ["items.renew"],
      tokenUrl: `${oauth.origin}/token`,
    };
    const seen: string[] = [];
    upstream.setHandler((req, res) => {
      seen.push(req.headers.authorization ?? "");
      const status = seen.length === 1 ? 401 : 200;
      res.writeHead(status, { "content-type": "text/plain" });
      res.end(`you sent: ${seen.join(" and ")}`);
    });
    const result = await executeOnce(executor(), request(profile));
    assert.equal(result.status, 200);
    assert.equal(seen.length, 2);
    assert.notEqual(seen[0], seen[1]);
    assertAbsent(
      result,
      seen.map((h) => h.slice(7)),
    );
    assert.match(String(result.body), /^you sent: \*+ and \*+$/);
  });

  it("a user's grant: the access token and the refresh token are scrubbed", async () => {
    const grant = { accessToken: canary("at-"), refreshToken: canary("rt-"), tokenType: "Bearer" as const };
    await tokens.tokenSetStore.put(userGrantKey("acme", "user-oauth", "user-1"), grant);
    known = [grant.refreshToken];
    const profile: AuthProfile = {
      type: "oauth_user",
      id: "user-oauth",
      authorizationUrl: `${oauth.origin}/authorize`,
      tokenUrl: `${oauth.origin}/token`,
      clientId: CLIENT_ID,
      clientSecretRef: "ref:cs",
      scopes: [],
    };
    const result = await executeOnce(
      executor(),
      request(profile, { endUser: { partnerId: "acme", subjectId: "user-1" } }),
    );
    assert.equal(upstream.requests.at(-1)?.headers.authorization, `Bearer ${grant.accessToken}`);
    assertAbsent(result, [grant.accessToken, grant.refreshToken, CLIENT_SECRET]);
  });

  it("asks the upstream for identity encoding", async () => {
    const key: AuthProfile = {
      type: "static",
      id: "k",
      kind: "api_key",
      in: "query",
      name: "api_key",
      secretRef: "ref:key",
    };
    const result = await executeOnce(executor(), request(key));
    const seen = upstream.requests.at(-1);
    assert.equal(seen?.headers["accept-encoding"], "identity");
    assert.ok(seen?.target.includes(`api_key=${encodeURIComponent(API_KEY)}`));
    assertAbsent(result, [API_KEY]);
  });

  it("a secret too short to scrub refuses the call before anything is sent", async () => {
    const key = HEADER_KEY;
    const error = await rejection(executeOnce(executor({ "ref:key": "tiny-7c" }), request(key)));
    assert.equal(error.reason, "auth_profile_unavailable");
    assert.equal(error.details?.issue, "credential_too_short");
    assert.equal(error.upstreamError, undefined);
    assert.equal(upstream.requests.length, 0);
    assert.equal(JSON.stringify(error.toJSON()).includes("tiny-7c"), false);
  });

  it("a content coding the client cannot decode is refused after the call: 502 scrub_failed", async () => {
    upstream.setHandler((_req, res) => {
      res.writeHead(200, { "content-type": "text/plain", "content-encoding": "x-unknown" });
      res.end(`key=${API_KEY}`);
    });
    const key = HEADER_KEY;
    const error = await rejection(executeOnce(executor(), request(key)));
    assert.equal(error.code, "scrub_failed");
    assert.equal(error.status, 502);
    assert.equal(error.details?.issue, "content_encoding_unsupported");
    assert.deepEqual(error.upstreamError, { kind: "unusable", status: 200 });
    assert.ok(error.requestHash?.startsWith("sha256:"));
  });

  // A list the client leaves coded as a whole (a coding it does not decode anywhere in it, an
  // empty member included) must not pass as decoded: the scrubber would read coded bytes.
  for (const coding of ["gzip, identity", "gzip,", "identity, gzip", "gzip, x-unknown"]) {
    it(`an answer coded "${coding}" is not passed on as if decoded: 502 scrub_failed`, async () => {
      upstream.setHandler((_req, res) => {
        res.writeHead(200, { "content-type": "text/plain", "content-encoding": coding });
        res.end(gzipSync(Buffer.from(`key=${API_KEY} `.repeat(4))));
      });
      const key = HEADER_KEY;
      const error = await rejection(executeOnce(executor(), request(key)));
      assert.equal(error.code, "scrub_failed");
      assert.equal(error.details?.issue, "content_encoding_unsupported");
    });
  }

  // The gate's request decodes what fetch decoded (decision 2841): a coded answer is scrubbed
  // like a plain one, whichever of the codings it uses, stacked or not.
  const codings: readonly [string, string, (body: Buffer) => Buffer][] = [
    ["gzip", "", (body) => gzipSync(body)],
    ["x-gzip", "", (body) => gzipSync(body)],
    ["deflate", " (zlib)", (body) => deflateSync(body)],
    ["deflate", " (raw)", (body) => deflateRawSync(body)],
    ["br", "", (body) => brotliCompressSync(body)],
    ["gzip, br", "", (body) => brotliCompressSync(gzipSync(body))],
  ];
  for (const [coding, form, encode] of codings) {
    it(`an answer coded ${coding}${form} is decoded, then scrubbed`, async () => {
      upstream.setHandler((_req, res) => {
        res.writeHead(200, { "content-type": "application/json", "content-encoding": coding });
        res.end(encode(Buffer.from(JSON.stringify({ echoed: `key=${API_KEY}`, name: "Widget" }))));
      });
      const key = HEADER_KEY;
      const result = await executeOnce(executor(), request(key));
      assert.equal((result.body as { name?: string }).name, "Widget");
      assertAbsent(result, [API_KEY]);
      assert.ok(result.redactionEvents.some((e) => e.source === "secret"));
    });
  }

  it("rules and a body that is not JSON: 502 redaction_failed, nothing of the body returned", async () => {
    upstream.setHandler((_req, res) => {
      res.writeHead(200, { "content-type": "text/html" });
      res.end('<pre>{"card_number":"4111111111111111"}</pre>');
    });
    const key = HEADER_KEY;
    const error = await rejection(
      executeOnce(
        executor(),
        request(key, { redactions: [{ path: "/card_number", mode: "mask", keep_last: 4 }] }),
      ),
    );
    assert.equal(error.code, "redaction_failed");
    assert.equal(error.details?.issue, "content_type");
    assert.equal(JSON.stringify(error.toJSON()).includes("4111"), false);
  });
});
