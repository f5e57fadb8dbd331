/**
 * The managed crypto API (`authority managed`, spec part B): four POST operations over
 * HTTPS, each authenticated with five headers. Per call: check the request, rate-limit the
 * username, trade username and password for a bearer token (cached), call the upstream
 * crypto service with the token and the partner keys, answer `{ statusCode, body }`.
 */

import type { AddressInfo } from "node:net";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import {
  type CryptoClient,
  CryptoClientError,
  type CryptoCredentials,
  createCryptoClient,
} from "../../clients/crypto-service/client.ts";
import { createTokenCache } from "../../clients/idp/token-cache.ts";
import { AuthorityError, toAuthorityError } from "../../errors.ts";
import { installOpenApi, serializeWithoutFiltering } from "../http/openapi.ts";
import { createHttpServer } from "../http/server.ts";
import { ManagedError, type ManagedReason } from "./errors.ts";
import { managedPasswordGrant } from "./idp.ts";
import { describeOperation, livenessSchema } from "./openapi.ts";
import { type Operation, operations } from "./operations.ts";
import { ManagedConfigError, type ManagedServerOptions, resolveManagedOptions } from "./options.ts";
import { createRateLimiter } from "./rate-limiter.ts";
import { CREDENTIAL_HEADERS, type ManagedCredentials, parseManagedRequest } from "./request.ts";

export interface ManagedServer {
  readonly app: FastifyInstance;
  /** Starts serving HTTPS; returns the base URL actually bound. */
  listen(address?: { readonly host?: string; readonly port?: number }): Promise<string>;
  close(): Promise<void>;
}

const clientFailures: Record<CryptoClientError["code"], ManagedReason> = {
  upstream_unavailable: "upstream_unavailable",
  upstream_timeout: "upstream_timeout",
  upstream_error: "upstream_error",
  invalid_token: "upstream_token_rejected",
  invalid_credentials: "invalid_partner_credentials",
  invalid_ciphertext: "invalid_ciphertext",
  invalid_signature: "invalid_signature",
  wrong_purpose: "invalid_signature",
  unknown_recipient: "invalid_data",
  unknown_owner: "unknown_owner",
  not_delegated: "owner_not_delegated",
  invalid_request: "invalid_data",
};

function toManaged(error: unknown): unknown {
  if (error instanceof CryptoClientError) {
    const reason = clientFailures[error.code];
    return new ManagedError(reason, {
      cause: error,
      ...(reason === "upstream_unavailable" || reason === "upstream_error" ? { retryAfterSec: 5 } : {}),
    });
  }
  return error;
}

export async function createManagedServer(options: ManagedServerOptions): Promise<ManagedServer> {
  const config = resolveManagedOptions(options);
  const client: CryptoClient =
    config.cryptoClient ??
    createCryptoClient({
      baseUrl: config.cryptoUrl ?? "",
      timeoutMs: config.upstreamTimeoutMs,
      // The envelope and the signed blob cross the hop as bytes (decision 3011).
      binaryBodies: true,
    });
  const tokens = createTokenCache(
    managedPasswordGrant({
      tokenUrl: config.idpTokenUrl,
      timeoutMs: config.idp.timeoutMs,
      ...(config.idp.clientId === undefined ? {} : { clientId: config.idp.clientId }),
      ...(config.idp.clientSecret === undefined ? {} : { clientSecret: config.idp.clientSecret }),
      ...(config.idp.scope === undefined ? {} : { scope: config.idp.scope }),
      ...(config.idp.audience === undefined ? {} : { audience: config.idp.audience }),
    }),
    { ...config.tokenCache, now: config.now },
  );
  const limiter = createRateLimiter(config.rateLimit, { now: config.now });

  const app = createHttpServer({
    bodyLimit: config.bodyLimit,
    https: config.https,
    logger: config.logger,
  });
  serializeWithoutFiltering(app);
  await installOpenApi(app, {
    title: "Managed crypto API",
    version: "0.1.0",
    description:
      "Encrypt, decrypt, sign-encrypt and decrypt-verify for partners; every call carries five credential headers. docs/managed-crypto.md.",
    securitySchemes: Object.fromEntries(
      CREDENTIAL_HEADERS.map((name) => [name, { type: "apiKey", in: "header", name }]),
    ),
    security: [Object.fromEntries(CREDENTIAL_HEADERS.map((name) => [name, []]))],
  });

  /** One upstream call; a token the upstream refuses is dropped and replaced once. */
  async function callUpstream(
    operation: Operation,
    credentials: ManagedCredentials,
    value: string,
    requestId: string,
    purpose: string | undefined,
    signedBlob: boolean | undefined,
  ) {
    const { username, password } = credentials;
    const upstream = (token: string): CryptoCredentials => ({
      token,
      apiKey: credentials.apiKey,
      accessKey: credentials.accessKey,
      secretKey: credentials.secretKey,
      ...(credentials.actAs === undefined ? {} : { actAs: credentials.actAs }),
    });
    const token = await tokens.get(username, password);
    try {
      return await operation.run(client, upstream(token), value, requestId, purpose, signedBlob);
    } catch (error) {
      if (!(error instanceof CryptoClientError && error.code === "invalid_token")) throw error;
      tokens.invalidate(username, password, token);
      return operation.run(
        client,
        upstream(await tokens.get(username, password)),
        value,
        requestId,
        purpose,
        signedBlob,
      );
    }
  }

  for (const operation of operations) {
    app.post(
      operation.path,
      describeOperation(operation),
      async (request: FastifyRequest, reply: FastifyReply) => {
        try {
          const { credentials, value, purpose, signedBlob } = parseManagedRequest(
            request.headers,
            request.body,
            operation.field,
          );
          if (signedBlob !== undefined && operation.name !== "decrypt-verify") {
            throw new ManagedError("invalid_field", {
              message: "The body field signed_blob is not used by this operation.",
              fields: ["signed_blob"],
            });
          }
          if (purpose !== undefined && !operation.takesPurpose) {
            throw new ManagedError("invalid_field", {
              message: "The body field purpose is not used by this operation.",
              fields: ["purpose"],
            });
          }
          const decision = limiter.take(credentials.username);
          if (!decision.allowed)
            throw new ManagedError("rate_limited", { retryAfterSec: decision.retryAfterSec });
          const body = await callUpstream(operation, credentials, value, request.id, purpose, signedBlob);
          return reply.header("cache-control", "no-store").send({ statusCode: 200, body });
        } catch (raw) {
          const error = toManaged(raw);
          if (error instanceof ManagedError) {
            if (error.retryAfterSec !== undefined) reply.header("retry-after", String(error.retryAfterSec));
            throw toAuthorityError(error);
          }
          throw error instanceof AuthorityError ? error : raw;
        }
      },
    );
  }

  app.get("/healthz", { schema: { security: [], response: { 200: livenessSchema } } }, async () => ({
    status: "ok",
  }));

  let listening = false;
  return {
    app,
    async listen(address = {}) {
      if (listening) throw new ManagedConfigError("already listening");
      listening = true;
      await app.listen({ host: address.host ?? "127.0.0.1", port: address.port ?? 0 });
      const bound = app.server.address() as AddressInfo;
      const host = bound.family === "IPv6" ? `[${bound.address}]` : bound.address;
      return `https://${host === "0.0.0.0" || host === "[::]" ? "127.0.0.1" : host}:${bound.port}`;
    },
    close: () => app.close(),
  };
}
