/**
 * A real authority service for runtime tests: the dev IdP on a free port (tokens and JWKS
 * over real HTTP), the service built from configuration with a real store (SQLite in a
 * temp dir, or the given URL), listening on 127.0.0.1:0.
 */
import { join } from "node:path";
import { resolveAuthorityConfig } from "../../../../src/config/authority.ts";
import { type AuthorityService, buildAuthorityService } from "../../../../src/servers/authority/build.ts";
import { createIdpServer, type IdpServer } from "../../../../src/servers/idp/index.ts";
import { checkResponsesAgainstDocument } from "../../../helpers/openapi-conformance.ts";
import { makeTempDir, type TempDir } from "../../../helpers/temp-dir.ts";

export interface Harness {
  readonly idp: IdpServer;
  readonly service: AuthorityService;
  readonly url: string;
  readonly dir: TempDir;
  token(subject: string, options?: { roles?: string[]; partnerId?: string }): Promise<string>;
  authorize(body: unknown, token?: string): Promise<{ status: number; body: Record<string, unknown> }>;
  get(path: string, token: string): Promise<{ status: number; body: Record<string, unknown> }>;
  close(): Promise<void>;
}

export async function startHarness(
  options: { storeUrl?: string; settings?: Record<string, string> } = {},
): Promise<Harness> {
  const dir = await makeTempDir("authority-runtime-");
  const idp = await createIdpServer({});
  await idp.listen({ host: "127.0.0.1", port: 0 });
  const config = resolveAuthorityConfig({
    flags: {
      listen: "127.0.0.1:0",
      issuer: idp.issuer,
      "state-dir": dir.path,
      store: options.storeUrl ?? `sqlite:${join(dir.path, "authority.db")}`,
      "log-level": "silent",
      "policy-protection": "embedded",
      ...options.settings,
    },
    env: {},
  });
  // A fresh state directory: the test does the explicit KEK init an operator does once.
  const service = await buildAuthorityService({ ...config, kek: { ...config.kek, createIfMissing: true } });
  const conformance = checkResponsesAgainstDocument(service.app);
  const url = await service.listen();

  const send = async (method: string, path: string, token: string | undefined, body?: unknown) => {
    const headers: Record<string, string> = {};
    if (token !== undefined) headers.authorization = `Bearer ${token}`;
    if (body !== undefined) headers["content-type"] = "application/json";
    const response = await fetch(`${url}${path}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };

  return {
    idp,
    service,
    url,
    dir,
    async token(subject, tokenOptions = {}) {
      const issued = await idp.issueToken({
        subject,
        ...(tokenOptions.roles === undefined ? {} : { roles: tokenOptions.roles }),
        ...(tokenOptions.partnerId === undefined ? {} : { claims: { partner_id: tokenOptions.partnerId } }),
      });
      return issued.accessToken;
    },
    authorize: (body, token) => send("POST", "/v1/authorize-invocation", token, body),
    get: (path, token) => send("GET", path, token),
    async close() {
      await service.close();
      await idp.close();
      await dir.cleanup();
      conformance.assertConforming();
    },
  };
}
