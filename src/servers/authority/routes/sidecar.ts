import { createHash } from "node:crypto";
import type { FastifyPluginAsync, FastifyReply } from "fastify";
import {
  noContent,
  sidecarAuthMaterialSchema,
  sidecarCapabilitySchema,
  sidecarDecisionsAcceptedSchema,
  sidecarPolicyChangesSchema,
  sidecarPolicyKeysSchema,
  sidecarPolicySchema,
  sidecarSelfSchema,
} from "../../../admin/admin-response-schemas.ts";
import { idSchemas, paramsSchema } from "../../../admin/admin-schemas.ts";
import { createAuthProfileSecretResolver, loadExecutionAuthProfile } from "../../../admin/auth-profiles.ts";
import { loadCatalog } from "../../../admin/capabilities.ts";
import type { DecisionInput } from "../../../audit/records.ts";
import { decisionBatchSchema, type ShippedDecision } from "../../../audit/shipped-decisions.ts";
import { placeShippedDecisions } from "../../../audit/shipped-ids.ts";
import { isValidId } from "../../../core/ids.ts";
import { identityOf, type SubjectIdentity } from "../../../core/subject-identity.ts";
import type { PublicKeyRingJson } from "../../../crypto/index.ts";
import { AuthorityError } from "../../../errors.ts";
import { headerSafe, resolveSecret } from "../../../execute/auth-profiles.ts";
import type { Principal } from "../../../identity/principal.ts";
import { PolicyProtectionError } from "../../../policy/protector.ts";
import type { PolicyRecord } from "../../../policy/record.ts";
import { type PolicyCollection, readPolicyRecord } from "../../../policy/record-store.ts";
import { type CapabilityRecord, collections, type SubjectRecord, storeKeys } from "../../../store/model.ts";
import { authenticateAll } from "../authenticate.ts";
import type { AuthorityServices } from "../services.ts";

/**
 * What sidecars fetch from the authority service (docs/sidecar.md, "Trust model"):
 *
 * - `GET /v1/sidecar/policies/{subject}` — the subject's stored PolicyRecord **without its
 *   encrypted artifact**, the subject's partner, and `signed_policy`: the signed blob the
 *   authority found inside the artifact (signed document + ML-DSA signature + policy text,
 *   signed by the crypto service when the policy was protected). The sidecar verifies that
 *   signature with the signer's public key; it holds no key that opens an artifact, and this
 *   route never hands one out. `signed_policy` is null when the artifact does not open (the
 *   sidecar then denies `policy_verification_failed`, as the authority does).
 *   `ETag: "<head>"`; `If-None-Match` with the current head answers 304.
 * - `GET /v1/sidecar/policy-keys/{owner}` — the public keys of a policy signer
 *   (`service:<identity>`, or `subject:<id>` of a subject the sidecar may see), as the
 *   crypto service exports them.
 * - `GET /v1/sidecar/capabilities/{partner}/{capability}` — the current catalog the decision
 *   engine matches requests against.
 * - `GET /v1/sidecar/auth-profiles/{partner}/{profile}` — the upstream credentials of an auth
 *   profile, ready to inject (headers / query parameters), with how long they may be cached.
 * - `GET /v1/sidecar/self` — who the caller is to the authority: a sidecar proves its own
 *   credentials with it before it reports ready.
 * - `GET /v1/sidecar/policy-changes?after=<cursor>&instance=<id>&wait=true` — the policy change
 *   log after `after` (a partner-bound caller follows its partner's own log: its cursor and
 *   answers depend on nothing another partner changed), held up to a
 *   45 % of a lease (≤ 1 s) for a change when there is none; an answer that reached the end of
 *   the log is the sidecar's freshness lease, and the read acknowledges every change up to
 *   `after` (src/policy/change-log.ts, decision 2507).
 *
 * Only principals with role `sidecar` or scope `authority/sidecar` may call them; a
 * principal whose token carries `partner_id` is limited to that partner's subjects,
 * capabilities and profiles. Every answer is `Cache-Control: no-store`.
 */

export const SIDECAR_ROLE = "sidecar";
export const SIDECAR_SCOPE = "authority/sidecar";
/** How long a sidecar may keep static credentials before asking again. */
export const STATIC_CREDENTIALS_TTL_SECONDS = 300;
/** How long a sidecar may keep a client-credentials access token (the token cache renews 30 s early). */
export const TOKEN_CREDENTIALS_TTL_SECONDS = 30;

/** Marks a sidecar credential without a partner as platform-wide, explicitly (decision 2513). */
export const SIDECAR_PLATFORM_ROLE = "sidecar_platform";
export const SIDECAR_PLATFORM_SCOPE = "authority/sidecar.platform";
/** `authority/sidecar.capability:<capability id>`: a capability of the pod's capability map. */
export const SIDECAR_CAPABILITY_SCOPE_PREFIX = "authority/sidecar.capability:";
const MAX_CAPABILITY_SCOPES = 64;

function isPlatformWide(principal: Principal): boolean {
  return (
    principal.partnerId === undefined &&
    (principal.roles.includes(SIDECAR_PLATFORM_ROLE) || principal.scopes.includes(SIDECAR_PLATFORM_SCOPE))
  );
}

function assertSidecar(principal: Principal): void {
  if (!principal.roles.includes(SIDECAR_ROLE) && !principal.scopes.includes(SIDECAR_SCOPE)) {
    throw new AuthorityError(
      "insufficient_role",
      `This route needs the role ${SIDECAR_ROLE} or the scope ${SIDECAR_SCOPE}.`,
    );
  }
  // A credential without a partner would read every partner's records and upstream secrets:
  // only one the operator marked platform-wide may.
  if (principal.partnerId === undefined && !isPlatformWide(principal)) {
    throw new AuthorityError(
      "insufficient_role",
      `This sidecar credential has no partner_id: give it one, or mark it platform-wide with the role ${SIDECAR_PLATFORM_ROLE} (or the scope ${SIDECAR_PLATFORM_SCOPE}).`,
    );
  }
}

/**
 * A partner's sidecar reads the upstream credentials of an auth profile only when a capability
 * its credential names (scopes `authority/sidecar.capability:<id>`, the pod's capability map)
 * uses that profile; a platform-wide sidecar reads any.
 */
async function assertProfileInCapabilities(
  context: AuthorityServices,
  principal: Principal,
  partnerId: string,
  profileId: string,
): Promise<void> {
  if (isPlatformWide(principal)) return;
  const capabilities = principal.scopes
    .filter((scope) => scope.startsWith(SIDECAR_CAPABILITY_SCOPE_PREFIX))
    .map((scope) => scope.slice(SIDECAR_CAPABILITY_SCOPE_PREFIX.length))
    .filter((capabilityId) => isValidId("capability", capabilityId));
  // Bounded store reads per call, whatever the token carries (a pod maps a few capabilities).
  for (const capabilityId of [...new Set(capabilities)].slice(0, MAX_CAPABILITY_SCOPES)) {
    const capability = await read(() =>
      context.store.get<CapabilityRecord>(
        collections.capabilities,
        storeKeys.capability(partnerId, capabilityId),
      ),
    );
    if (capability?.auth_profile_ref === profileId) return;
  }
  throw new AuthorityError(
    "insufficient_role",
    `This sidecar's credential names no capability that uses this auth profile (scope ${SIDECAR_CAPABILITY_SCOPE_PREFIX}<capability>).`,
  );
}

function assertPartner(principal: Principal, partnerId: string): void {
  if (principal.partnerId === undefined || principal.partnerId === partnerId) return;
  throw new AuthorityError(
    "insufficient_role",
    "This sidecar may not read or write another partner's records.",
  );
}

function storeUnavailable(error: unknown): AuthorityError {
  return error instanceof AuthorityError
    ? error
    : new AuthorityError("upstream_unavailable", undefined, { cause: error });
}

async function read<T>(what: () => Promise<T>): Promise<T> {
  try {
    return await what();
  } catch (error) {
    throw storeUnavailable(error);
  }
}

/** The weak validator a sidecar sends back: the record's head. */
export function policyEtag(head: number): string {
  return `"${head}"`;
}

function etagMatches(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  return header.split(",").some((candidate) => {
    const trimmed = candidate.trim();
    return trimmed === etag || trimmed === `W/${etag}`;
  });
}

/** A policy record as a sidecar sees it: everything but the encrypted artifact. */
export type SidecarPolicyRecord = Omit<PolicyRecord, "artifact">;

export interface SidecarPolicyResponse {
  readonly subject: {
    readonly subject_id: string;
    readonly partner_id: string;
    /** Which principals stand for the subject: the sidecar admits only those (src/core/subject-identity.ts). */
    readonly identity: SubjectIdentity;
  };
  readonly policy: SidecarPolicyRecord;
  /** base64 signed blob, or null when the stored artifact does not open. */
  readonly signed_policy: string | null;
}

/** The signed blob inside the record's artifact, opened through the authority's protector. */
async function signedPolicyOf(context: AuthorityServices, record: PolicyRecord): Promise<string | null> {
  const cache = context.signedPolicies;
  // Keyed by the artifact's own bytes: a changed artifact is opened (and judged) again.
  const key = `${record.subject_id}\u0000${record.crypto_version}\u0000${createHash("sha256").update(record.artifact).digest("base64url")}`;
  const cached = cache.get(key);
  if (cached !== undefined) return cached.blob;
  let blob: string | null;
  try {
    const opened = await context.protector.open(record.artifact, {
      cryptoVersion: record.crypto_version,
      subjectId: record.subject_id,
      partnerId: record.partner_id,
    });
    if (opened.signedBlob === undefined) {
      throw new AuthorityError(
        "upstream_unavailable",
        "The policy protector cannot hand out signed policies.",
      );
    }
    blob = opened.signedBlob;
  } catch (error) {
    if (error instanceof PolicyProtectionError && error.code === "policy_unverifiable") blob = null;
    else throw storeUnavailable(error);
  }
  cache.set(key, { blob });
  return blob;
}

const OWNER_PREFIXES = ["service:", "subject:"] as const;

export interface SidecarAuthMaterial {
  readonly partner_id: string;
  readonly profile_id: string;
  readonly type: string;
  readonly headers: Record<string, string>;
  readonly query: Record<string, string>;
  readonly expires_in: number;
}

const subjectParams = paramsSchema({ subject: idSchemas.subjectRef });
const ownerParams = paramsSchema({
  owner: { type: "string", minLength: 9, maxLength: 300, pattern: "^(?:service|subject):[\\x21-\\x7E]+$" },
});
const capabilityParams = paramsSchema({ partner: idSchemas.partner, capability: idSchemas.capability });
const profileParams = paramsSchema({ partner: idSchemas.partner, profile: idSchemas.local });

/**
 * A partner-less deny (no subject, or one of another partner) happened at this sidecar: from a
 * partner-bound sidecar it is that partner's record, so it cannot be filed as anyone else's.
 */
function ownedBy(principal: Principal, record: ShippedDecision): ShippedDecision {
  if (record.partner_id !== null || principal.partnerId === undefined) return record;
  return { ...record, partner_id: principal.partnerId };
}

function recordInput(record: ShippedDecision): DecisionInput {
  const { id: _id, ...input } = record;
  return input;
}

function noStore(reply: FastifyReply): FastifyReply {
  return reply.header("cache-control", "no-store");
}

async function authMaterial(
  context: AuthorityServices,
  partnerId: string,
  profileId: string,
): Promise<SidecarAuthMaterial> {
  const profile = await read(() => loadExecutionAuthProfile(context, partnerId, profileId));
  if (context.secretKeyRings === undefined) {
    throw new AuthorityError("upstream_unavailable", "Auth-profile secrets are not configured.");
  }
  const resolver = createAuthProfileSecretResolver(context);
  const base = { partner_id: partnerId, profile_id: profileId, type: profile.type };
  switch (profile.type) {
    case "none":
      return { ...base, headers: {}, query: {}, expires_in: STATIC_CREDENTIALS_TTL_SECONDS };
    case "static": {
      const secret = headerSafe(await resolveSecret(resolver, profile.secretRef));
      const headers: Record<string, string> = {};
      const query: Record<string, string> = {};
      if (profile.kind === "bearer") headers.authorization = `Bearer ${secret}`;
      else if (profile.in === "header") headers[profile.name.toLowerCase()] = secret;
      else query[profile.name] = secret;
      const credentials = { headers, query };
      return { ...base, ...credentials, expires_in: STATIC_CREDENTIALS_TTL_SECONDS };
    }
    case "oauth_client_credentials": {
      const token = headerSafe(await context.clientCredentials.getToken(profile));
      return {
        ...base,
        headers: { authorization: `Bearer ${token}` },
        query: {},
        expires_in: TOKEN_CREDENTIALS_TTL_SECONDS,
      };
    }
    default:
      // A user's delegated grant (or their token to exchange) belongs to one end user: a sidecar
      // injects per pod, never per user, and is never handed users' refresh tokens.
      throw new AuthorityError(
        "conflict",
        "This auth profile type cannot be injected by a sidecar: user-delegated profiles (oauth_user, oauth_token_exchange) run through binding invoke or MCP, which know the end user.",
        { details: { type: profile.type, issue: "user_delegated_profile" } },
      );
  }
}

export function sidecarRoutes(context: AuthorityServices): FastifyPluginAsync {
  return async (app) => {
    const principalOf = authenticateAll(app, context, assertSidecar);

    /** The subject (in the sidecar's partner scope) and its record in `collection`; 404 when either is missing. */
    const subjectPolicy = async (
      principal: Principal,
      subjectId: string,
      collection: PolicyCollection = collections.policies,
    ): Promise<{ subject: SubjectRecord; record: PolicyRecord }> => {
      const subject = await read(() =>
        context.store.get<SubjectRecord>(collections.subjects, storeKeys.subject(subjectId)),
      );
      if (subject === undefined) throw new AuthorityError("not_found", "No such subject.");
      assertPartner(principal, subject.partner_id);
      const record = await read(async () => {
        const found = await readPolicyRecord(context.store, subjectId, collection);
        return found?.partner_id === subject.partner_id ? found : undefined;
      });
      if (record === undefined) throw new AuthorityError("not_found", "The subject has no policy.");
      return { subject, record };
    };
    const policyBody = async (
      subject: SubjectRecord,
      record: PolicyRecord,
    ): Promise<SidecarPolicyResponse> => {
      const { artifact: _artifact, ...visible } = record;
      return {
        subject: {
          subject_id: subject.subject_id,
          partner_id: subject.partner_id,
          identity: identityOf(subject),
        },
        policy: visible,
        signed_policy: await signedPolicyOf(context, record),
      };
    };

    app.get<{ Params: { subject: string } }>(
      "/v1/sidecar/policies/:subject",
      { schema: { response: { 200: sidecarPolicySchema, 304: noContent }, params: subjectParams } },
      async (request, reply) => {
        const { subject, record } = await subjectPolicy(principalOf(request), request.params.subject);
        const etag = policyEtag(record.head);
        noStore(reply).header("etag", etag);
        if (etagMatches(request.headers["if-none-match"], etag)) return reply.code(304).send();
        return reply.send(await policyBody(subject, record));
      },
    );

    // The subject's shadow policy (decision 2761), signed and handed out like its policy; the
    // sidecar verifies it the same way and only records what it decides.
    app.get<{ Params: { subject: string } }>(
      "/v1/sidecar/shadow-policies/:subject",
      { schema: { response: { 200: sidecarPolicySchema }, params: subjectParams } },
      async (request, reply) => {
        const { subject, record } = await subjectPolicy(
          principalOf(request),
          request.params.subject,
          collections.shadowPolicies,
        );
        return noStore(reply).send(await policyBody(subject, record));
      },
    );

    app.get<{ Params: { owner: string } }>(
      "/v1/sidecar/policy-keys/:owner",
      { schema: { response: { 200: sidecarPolicyKeysSchema }, params: ownerParams } },
      async (request, reply) => {
        const principal = principalOf(request);
        const { owner } = request.params;
        const prefix = OWNER_PREFIXES.find((candidate) => owner.startsWith(candidate));
        const name = prefix === undefined ? "" : owner.slice(prefix.length);
        if (prefix === "service:" && name !== context.config.serviceIdentity) {
          throw new AuthorityError("not_found", "No such policy signer.");
        }
        if (prefix === "subject:") {
          // Only a subject that exists (no key ring is made for a name a caller invents), of a
          // partner this sidecar may see.
          const subject = await read(() =>
            context.store.get<SubjectRecord>(collections.subjects, storeKeys.subject(name)),
          );
          if (subject === undefined) throw new AuthorityError("not_found", "No such policy signer.");
          assertPartner(principal, subject.partner_id);
        }
        const signerKeys = context.protector.signerKeys;
        if (signerKeys === undefined) {
          throw new AuthorityError("upstream_unavailable", "Policy signer keys are not available.");
        }
        const keys: PublicKeyRingJson = await read(() => signerKeys.call(context.protector, owner));
        return noStore(reply).send(keys);
      },
    );

    app.get<{ Params: { partner: string; capability: string } }>(
      "/v1/sidecar/capabilities/:partner/:capability",
      { schema: { response: { 200: sidecarCapabilitySchema }, params: capabilityParams } },
      async (request, reply) => {
        const { partner, capability } = request.params;
        assertPartner(principalOf(request), partner);
        const loaded = await read(() => loadCatalog(context.store, partner, capability));
        if (loaded === undefined) throw new AuthorityError("not_found", "No such capability.");
        // The platform-wide log-only mode (decision 2761): the sidecar applies it like the authority.
        const logOnly = await read(() => context.decisions.logOnly.covers(partner, capability));
        return noStore(reply).send({ capability: loaded.catalog, ...(logOnly ? { log_only: true } : {}) });
      },
    );

    app.post<{ Body: { records: ShippedDecision[]; exported?: boolean } }>(
      "/v1/sidecar/decisions",
      { schema: { response: { 200: sidecarDecisionsAcceptedSchema }, body: decisionBatchSchema } },
      async (request, reply) => {
        const principal = principalOf(request);
        const { records } = request.body;
        // A sidecar that exports its decision records says so: exported once, by it (decision 2797).
        const recordOptions = { exported: request.body.exported === true };
        for (const record of records) {
          // An allow always knows its partner; only denies that came before it may lack one.
          if (record.partner_id !== null || record.decision === "allowed")
            assertPartner(principal, record.partner_id ?? "");
        }
        const recorder = context.decisions.recorder;
        // Sidecars get at most half of the audit buffer, and a batch goes in whole or not at all:
        // the authority's own decisions keep room while sidecars send a backlog.
        if (recorder.room() - records.length < recorder.capacity / 2) {
          throw new AuthorityError("upstream_unavailable", "The audit log is not accepting records.");
        }
        // A batch sent again (its reply was lost: a timeout, a replica killed after storing it)
        // holds records stored already: they are not recorded twice, nor linked into this
        // replica's chain a second time (the store's id check alone would leave a hole in it).
        // An id another sidecar's record holds is no such re-send: that record is kept under a
        // new id (audit/shipped-ids.ts), so no one can hide a decision by sending its id first.
        const { placed, collided } = await read(() =>
          placeShippedDecisions(
            context.store,
            records.map((record) => ({ record, input: recordInput(ownedBy(principal, record)) })),
          ),
        );
        if (collided > 0)
          request.log.warn(
            { sidecar: principal.subject, partner_id: principal.partnerId ?? null, collided },
            "shipped decision ids held by other records: stored under new ids",
          );
        // Stored (or safely queued by the recorder) before the sidecar may drop its copy.
        await read(() =>
          Promise.all(placed.map(({ input, id }) => recorder.record(input, id, recordOptions))),
        );
        return noStore(reply).send({ accepted: records.length });
      },
    );

    app.get<{ Querystring: { after?: string; instance?: string; wait?: string } }>(
      "/v1/sidecar/policy-changes",
      {
        schema: {
          response: { 200: sidecarPolicyChangesSchema },
          querystring: {
            type: "object",
            additionalProperties: false,
            properties: {
              after: { type: "string", pattern: "^(?:0|[1-9][0-9]{0,14})$" },
              instance: { type: "string", pattern: "^[A-Za-z0-9_-]{16,64}$" },
              wait: { type: "string", enum: ["true", "false"] },
            },
          },
        },
      },
      async (request, reply) => {
        const principal = principalOf(request);
        const leases = context.sidecarLeases;
        if (leases === undefined) {
          throw new AuthorityError("upstream_unavailable", "Sidecar freshness leases are not configured.");
        }
        const { after, instance, wait } = request.query;
        const page = await read(() =>
          leases.read({
            after: after === undefined ? undefined : Number(after),
            instance,
            principal: principal.subject,
            partnerId: principal.partnerId,
            wait: wait === "true",
          }),
        );
        return noStore(reply).send(page);
      },
    );

    app.get(
      "/v1/sidecar/self",
      { schema: { response: { 200: sidecarSelfSchema } } },
      async (request, reply) => {
        const principal = principalOf(request);
        return noStore(reply).send({ subject: principal.subject, partner_id: principal.partnerId ?? null });
      },
    );

    app.get<{ Params: { partner: string; profile: string } }>(
      "/v1/sidecar/auth-profiles/:partner/:profile",
      { schema: { response: { 200: sidecarAuthMaterialSchema }, params: profileParams } },
      async (request, reply) => {
        const { partner, profile } = request.params;
        const principal = principalOf(request);
        assertPartner(principal, partner);
        await assertProfileInCapabilities(context, principal, partner, profile);
        return noStore(reply).send(await authMaterial(context, partner, profile));
      },
    );
  };
}
