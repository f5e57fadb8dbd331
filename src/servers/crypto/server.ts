/**
 * The upstream post-quantum crypto service (`authority crypto`): per-owner ML-KEM-768 /
 * ML-DSA-65 key rings, the action route the managed API and the authority service call,
 * and admin routes to provision and rotate owners. Wire format: docs/managed-crypto.md.
 */

import type { AddressInfo } from "node:net";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { PartnerCredentials } from "../../clients/crypto-service/credentials.ts";
import { CryptoServiceError } from "../../clients/crypto-service/reasons.ts";
import {
  ACT_AS_HEADER,
  ACTIONS_PATH,
  type ActionRequest,
  ADMIN_OWNERS_PATH,
  BINARY_ACTION_TYPE,
  DELEGATED_OWNER_PREFIX,
  DELEGATED_OWNERS_PATH,
  PARTNER_HEADERS,
  PUBLIC_KEYS_PATH,
  parseActionRequest,
  parseBinaryActionRequest,
  splitBinaryBody,
} from "../../clients/crypto-service/wire.ts";
import { parseBoundedJson } from "../../core/bounded-json.ts";
import { isRecord } from "../../core/own-property.ts";
import { CryptoError, type PublicKeyRingJson } from "../../crypto/index.ts";
import { createCryptoWorkerPool } from "../../crypto/worker-pool.ts";
import { AuthorityError, toAuthorityError } from "../../errors.ts";
import { extractBearer, hasRole } from "../../identity/bearer.ts";
import { tokenErrorToAuthorityError } from "../../identity/errors.ts";
import type { JwtVerifier, VerifiedToken } from "../../identity/jwt-verifier.ts";
import { isStoreError, storeErrorToAuthority } from "../../store/errors.ts";
import { createHttpServer } from "../http/server.ts";
import { createActionService } from "./action-service.ts";
import { binaryAnswer, jsonAnswer } from "./actions.ts";
import { CryptoServerConfigError, type CryptoServerOptions, resolveCryptoServerOptions } from "./options.ts";
import {
  assertOwnerId,
  createOwnerRegistry,
  type EnsuredService,
  type EnsureServiceInput,
  OWNER_KINDS,
  type Owner,
  type OwnerKind,
  type ProvisionOwnerInput,
} from "./owner-registry.ts";
import { cachingVerifier } from "./verified-tokens.ts";

export interface ListenAddress {
  readonly host?: string;
  readonly port?: number;
}

/** What provisioning returns: the credentials appear here once and are never stored in clear. */
export interface ProvisionedOwner {
  readonly id: string;
  readonly kind: OwnerKind;
  readonly apiKey: string;
  readonly accessKey: string;
  readonly secretKey: string;
  readonly keyId: string;
  readonly createdAt: string;
  readonly publicKeys: PublicKeyRingJson;
}

export interface RotatedOwner {
  readonly id: string;
  readonly keyId: string;
  readonly previousKeyId: string;
  readonly rotatedAt: string;
  readonly publicKeys: PublicKeyRingJson;
}

export interface CryptoServer {
  readonly app: FastifyInstance;
  /** Starts serving; returns the base URL actually bound. */
  listen(address?: ListenAddress): Promise<string>;
  close(): Promise<void>;
  provisionOwner(input: ProvisionOwnerInput): Promise<ProvisionedOwner>;
  /** The operator's service owner, kept as its mounted secret says (OwnerRegistry.ensureService). */
  ensureServiceOwner(input: EnsureServiceInput): Promise<EnsuredService>;
  rotateOwner(id: string): Promise<RotatedOwner>;
  publicKeys(id: string): Promise<PublicKeyRingJson>;
  hasOwner(id: string): Promise<boolean>;
}

/** Turns any failure into the public error; details of crypto and store failures stay in logs. */
function toPublic(error: unknown): unknown {
  if (error instanceof AuthorityError) return error;
  if (error instanceof CryptoServiceError) return toAuthorityError(error);
  if (isStoreError(error)) return storeErrorToAuthority(error);
  if (error instanceof CryptoError) return new AuthorityError("internal", undefined, { cause: error });
  return error;
}

function headerValue(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return typeof value === "string" && value.length > 0 ? value : undefined;
}

function provisionInput(body: unknown): ProvisionOwnerInput {
  if (!isRecord(body))
    throw new CryptoServiceError("invalid_request", { message: "The body must be a JSON object." });
  const { id, kind, allowed_subjects: subjects } = body;
  if (id === undefined || id === "") {
    throw new CryptoServiceError("missing_field", {
      message: "The body field id is required.",
      fields: ["id"],
    });
  }
  assertOwnerId(id);
  if (
    kind !== undefined &&
    !(typeof kind === "string" && (OWNER_KINDS as readonly string[]).includes(kind))
  ) {
    throw new CryptoServiceError("invalid_request", {
      message: "The body field kind must be partner, subject or service.",
      fields: ["kind"],
    });
  }
  if (subjects !== undefined && !Array.isArray(subjects)) {
    throw new CryptoServiceError("invalid_request", {
      message: "The body field allowed_subjects must be an array of strings.",
      fields: ["allowed_subjects"],
    });
  }
  return {
    id,
    ...(kind === undefined ? {} : { kind: kind as OwnerKind }),
    ...(subjects === undefined ? {} : { allowedSubjects: subjects as string[] }),
  };
}

function provisionedBody(owner: ProvisionedOwner): Record<string, unknown> {
  return {
    id: owner.id,
    kind: owner.kind,
    api_key: owner.apiKey,
    access_key: owner.accessKey,
    secret_key: owner.secretKey,
    key_id: owner.keyId,
    created_at: owner.createdAt,
    public_keys: owner.publicKeys,
  };
}

export async function createCryptoServer(options: CryptoServerOptions): Promise<CryptoServer> {
  const config = resolveCryptoServerOptions(options);
  const registry = await createOwnerRegistry({
    store: config.store,
    kek: config.kek,
    now: config.now,
    cacheTtlMs: config.ownerCacheTtlMs,
  });
  // Sign-encrypt and decrypt-verify run whole on worker threads (started at first use):
  // the event loop, which also serves HTTP, only passes messages.
  const pool =
    config.workerThreads === 0 ? undefined : createCryptoWorkerPool({ size: config.workerThreads });
  const actions = createActionService({
    registry,
    now: config.now,
    ...(pool === undefined ? {} : { signEngine: pool, verifyEngine: pool }),
  });
  const verifier: JwtVerifier = cachingVerifier(config.verifier, { maxAgeMs: config.tokenCacheMaxAgeMs });

  const app = createHttpServer({
    bodyLimit: config.bodyLimit,
    // Owner ids (OWNER_ID) are up to 128 characters and travel as a path parameter.
    maxParamLength: 128,
    logger: config.logger,
  });

  async function bearer(request: FastifyRequest): Promise<VerifiedToken> {
    let token: string | undefined;
    try {
      token = extractBearer(request.headers.authorization);
    } catch (error) {
      throw tokenErrorToAuthorityError(error, "invalid_token");
    }
    if (token === undefined) throw new AuthorityError("invalid_token", "A bearer token is required.");
    try {
      return await verifier.verify(token);
    } catch (error) {
      throw tokenErrorToAuthorityError(error, "invalid_token");
    }
  }

  async function admin(request: FastifyRequest): Promise<VerifiedToken> {
    const token = await bearer(request);
    if (!hasRole(token, config.adminRole)) throw new AuthorityError("insufficient_role");
    return token;
  }

  function partnerCredentials(request: FastifyRequest): PartnerCredentials {
    const missing = PARTNER_HEADERS.filter((name) => headerValue(request, name) === undefined);
    if (missing.length > 0) {
      throw new CryptoServiceError("missing_field", {
        message: `Missing or empty header(s): ${missing.join(", ")}.`,
        fields: missing,
      });
    }
    return {
      apiKey: headerValue(request, "api_key") ?? "",
      accessKey: headerValue(request, "access_key") ?? "",
      secretKey: headerValue(request, "secret_key") ?? "",
    };
  }

  function checkSubject(owner: Owner, token: VerifiedToken): void {
    if (owner.allowedSubjects !== undefined && !owner.allowedSubjects.includes(token.subject)) {
      throw new CryptoServiceError("subject_not_allowed");
    }
  }

  const handle =
    (run: (request: FastifyRequest, reply: FastifyReply) => Promise<unknown>) =>
    async (request: FastifyRequest, reply: FastifyReply) => {
      try {
        return await run(request, reply);
      } catch (error) {
        throw toPublic(error);
      }
    };

  /** The caller: a valid bearer token with the partner credentials of an owner it may use. */
  async function caller(request: FastifyRequest): Promise<Owner> {
    const token = await bearer(request);
    const owner = await registry.authenticate(partnerCredentials(request));
    checkSubject(owner, token);
    return owner;
  }

  /**
   * The owner a delegate acts for. The crypto service's own rule (decision 2513): only a
   * `service` owner delegates, only for `subject:` owners it provisioned itself.
   */
  function assertMayDelegate(delegate: Owner, id: unknown): asserts id is string {
    assertOwnerId(id);
    if (delegate.kind !== "service" || !id.startsWith(DELEGATED_OWNER_PREFIX)) {
      throw new CryptoServiceError("owner_not_delegated");
    }
  }

  async function delegated(delegate: Owner, id: unknown): Promise<Owner> {
    assertMayDelegate(delegate, id);
    const owner = await registry.get(id);
    if (owner === undefined) throw new CryptoServiceError("owner_not_found");
    if (owner.delegate !== delegate.id) throw new CryptoServiceError("owner_not_delegated");
    return owner;
  }

  // The action route's binary body (wire.ts BINARY_ACTION_TYPE): read as bytes, framed and
  // parsed by the route; every other route refuses it as it refuses any non-JSON body.
  app.addContentTypeParser(BINARY_ACTION_TYPE, { parseAs: "buffer" }, (_request, body, done) => {
    done(null, body);
  });

  /** A binary body's request; any fault of its frame or head is a 400 naming nothing inside. */
  function binaryActionRequest(body: Buffer): ActionRequest {
    let head: unknown;
    let bytes: Uint8Array;
    try {
      const split = splitBinaryBody(body);
      bytes = split.bytes;
      head = parseBoundedJson(split.head);
    } catch {
      throw new CryptoServiceError("invalid_request", {
        message: "The binary body is not a length-prefixed JSON head followed by the encrypted_data bytes.",
      });
    }
    return parseBinaryActionRequest(head, bytes);
  }

  app.post(
    ACTIONS_PATH,
    handle(async (request, reply) => {
      const authenticated = await caller(request);
      const actAs = request.headers[ACT_AS_HEADER];
      const owner = actAs === undefined ? authenticated : await delegated(authenticated, actAs);
      const body = request.body;
      const binary = Buffer.isBuffer(body);
      const action = binary ? binaryActionRequest(body) : parseActionRequest(body);
      const result = await actions.run(owner, action);
      reply.header("cache-control", "no-store");
      if (!("kind" in result)) return reply.send(result);
      if (binary) return reply.type(BINARY_ACTION_TYPE).send(binaryAnswer(result));
      return reply.send(jsonAnswer(result));
    }),
  );

  const delegatedBody = (owner: Owner) => ({
    id: owner.id,
    delegate: owner.delegate,
    key_id: owner.ring.current.keyId,
    created_at: owner.createdAt,
    public_keys: owner.ring.exportPublic(),
  });

  // Idempotent: the delegate asks again after a lost answer, or before a first policy write.
  app.post(
    DELEGATED_OWNERS_PATH,
    handle(async (request, reply) => {
      const delegate = await caller(request);
      const id = isRecord(request.body) ? request.body.id : undefined;
      assertMayDelegate(delegate, id);
      const existing = async () => {
        const found = await delegated(delegate, id);
        return reply.header("cache-control", "no-store").send(delegatedBody(found));
      };
      if ((await registry.get(id)) !== undefined) return existing();
      let owner: Owner;
      try {
        // Random credentials nobody receives: only the delegate reaches this owner (act_as).
        ({ owner } = await registry.provision({ id, kind: "subject", delegate: delegate.id }));
      } catch (error) {
        // A concurrent request made it first: answered as the existing owner it now is.
        if (error instanceof CryptoServiceError && error.reason === "owner_exists") return existing();
        throw error;
      }
      request.log.info(
        { owner: id, delegate: delegate.id, keyId: owner.ring.current.keyId },
        "delegated owner provisioned",
      );
      return reply.code(201).header("cache-control", "no-store").send(delegatedBody(owner));
    }),
  );

  app.post<{ Params: { id: string } }>(
    `${DELEGATED_OWNERS_PATH}/:id/rotate`,
    handle(async (request, reply) => {
      const owner = await delegated(await caller(request), (request.params as { id: string }).id);
      const rotated = await rotateOwner(owner.id);
      request.log.info(
        {
          owner: owner.id,
          delegate: owner.delegate,
          keyId: rotated.keyId,
          previousKeyId: rotated.previousKeyId,
        },
        "delegated owner rotated",
      );
      return reply.header("cache-control", "no-store").send({
        id: rotated.id,
        key_id: rotated.keyId,
        previous_key_id: rotated.previousKeyId,
        rotated_at: rotated.rotatedAt,
        public_keys: rotated.publicKeys,
      });
    }),
  );

  app.delete<{ Params: { id: string } }>(
    `${DELEGATED_OWNERS_PATH}/:id`,
    handle(async (request, reply) => {
      const owner = await delegated(await caller(request), (request.params as { id: string }).id);
      await registry.retire(owner.id);
      request.log.info({ owner: owner.id, delegate: owner.delegate }, "delegated owner retired");
      return reply.code(204).send();
    }),
  );

  const provisionOwner = async (input: ProvisionOwnerInput): Promise<ProvisionedOwner> => {
    const { owner, credentials } = await registry.provision(input);
    return {
      id: owner.id,
      kind: owner.kind,
      apiKey: credentials.apiKey,
      accessKey: credentials.accessKey,
      secretKey: credentials.secretKey,
      keyId: owner.ring.current.keyId,
      createdAt: owner.createdAt,
      publicKeys: owner.ring.exportPublic(),
    };
  };

  const rotateOwner = async (id: string): Promise<RotatedOwner> => {
    const { owner, previousKeyId } = await registry.rotate(id);
    return {
      id: owner.id,
      keyId: owner.ring.current.keyId,
      previousKeyId,
      rotatedAt: owner.rotatedAt ?? owner.createdAt,
      publicKeys: owner.ring.exportPublic(),
    };
  };

  const publicKeys = async (id: string): Promise<PublicKeyRingJson> => {
    assertOwnerId(id);
    const owner = await registry.get(id);
    if (owner === undefined) throw new CryptoServiceError("owner_not_found");
    return owner.ring.exportPublic();
  };

  app.post(
    ADMIN_OWNERS_PATH,
    handle(async (request, reply) => {
      await admin(request);
      const owner = await provisionOwner(provisionInput(request.body));
      request.log.info({ owner: owner.id, kind: owner.kind, keyId: owner.keyId }, "owner provisioned");
      return reply.code(201).header("cache-control", "no-store").send(provisionedBody(owner));
    }),
  );

  app.post<{ Params: { id: string } }>(
    `${ADMIN_OWNERS_PATH}/:id/rotate`,
    handle(async (request, reply) => {
      await admin(request);
      const { id } = request.params as { id: string };
      const rotated = await rotateOwner(id);
      request.log.info(
        { owner: id, keyId: rotated.keyId, previousKeyId: rotated.previousKeyId },
        "owner key ring rotated",
      );
      return reply.send({
        id: rotated.id,
        key_id: rotated.keyId,
        previous_key_id: rotated.previousKeyId,
        rotated_at: rotated.rotatedAt,
        public_keys: rotated.publicKeys,
      });
    }),
  );

  app.get<{ Params: { id: string } }>(
    `${ADMIN_OWNERS_PATH}/:id/public-keys`,
    handle(async (request, reply) => {
      await admin(request);
      const { id } = request.params as { id: string };
      return reply.send(await publicKeys(id));
    }),
  );

  // Public keys are public: any caller with a valid token may read them (the authority hands
  // them to sidecars, which verify signed policies without any private key).
  app.get<{ Params: { id: string } }>(
    `${PUBLIC_KEYS_PATH}/:id/public-keys`,
    handle(async (request, reply) => {
      await bearer(request);
      const { id } = request.params as { id: string };
      return reply.header("cache-control", "no-store").send(await publicKeys(id));
    }),
  );

  app.get("/healthz", async () => ({ status: "ok" }));
  app.get(
    "/readyz",
    handle(async (_request, reply) => {
      const health = await config.store.health();
      return reply
        .code(health.ok ? 200 : 503)
        .send({ status: health.ok ? "ready" : "unavailable", store: health.backend });
    }),
  );

  let listening = false;
  return {
    app,
    async listen(address = {}) {
      if (listening) throw new CryptoServerConfigError("already listening");
      listening = true;
      await app.listen({ host: address.host ?? "127.0.0.1", port: address.port ?? 0 });
      const bound = app.server.address() as AddressInfo;
      const host = bound.family === "IPv6" ? `[${bound.address}]` : bound.address;
      return `http://${host === "0.0.0.0" || host === "[::]" ? "127.0.0.1" : host}:${bound.port}`;
    },
    close: async () => {
      await app.close();
      await pool?.close();
    },
    provisionOwner,
    ensureServiceOwner: (input) => registry.ensureService(input),
    rotateOwner,
    publicKeys,
    async hasOwner(id) {
      return (await registry.get(id)) !== undefined;
    },
  };
}
