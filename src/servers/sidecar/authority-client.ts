import { type Capability, validateCapability } from "../../core/index.ts";
import type { JsonAnswer, JsonFetch } from "../../core/json-fetch.ts";
import { jsonParserDecodingBase64 } from "../../core/json-long-string.ts";
import { isRecord } from "../../core/own-property.ts";
import { isSubjectIdentity } from "../../core/subject-identity.ts";
import { PUBLIC_KEYS_FORMAT, type PublicKeyRingJson } from "../../crypto/index.ts";
import { traceHeaders } from "../../observability/tracing.ts";
import type { PolicyChangeSource, PolicyFetchResult, PolicyRecordFetcher } from "../../policy/cache/index.ts";
import type { PolicyChange, PolicyChangesPage } from "../../policy/change-log.ts";
import type { PolicyRecordFacts } from "../../policy/record.ts";
import type { PolicyKeySource } from "../../policy/signed-policy.ts";
import { AuthorityFetchError, positiveIntOption, SidecarConfigError } from "./errors.ts";
import type { ServiceTokenSource } from "./service-token.ts";

/**
 * The sidecar's client of the authority service's `/v1/sidecar/*` routes. Every call has
 * its own deadline; requests go through the transport its composition root gives (the sidecar's:
 * node:http with kept-alive agents, node-json-fetch.ts). Any answer
 * other than the expected ones is an AuthorityFetchError (`upstream_unavailable`): the
 * caller denies, it never guesses.
 */

export interface InjectableCredentials {
  readonly headers: Readonly<Record<string, string>>;
  readonly query: Readonly<Record<string, string>>;
  /** How long the sidecar may keep them (ms). */
  readonly ttlMs: number;
}

export interface AuthorityClient extends PolicyRecordFetcher, PolicyKeySource, PolicyChangeSource {
  fetchCapability(partnerId: string, capabilityId: string): Promise<Capability | undefined>;
  fetchCredentials(partnerId: string, profileId: string): Promise<InjectableCredentials>;
  /** The subject's shadow policy (decision 2761), verified by the sidecar like its policy. */
  fetchShadowPolicy?(subjectId: string): Promise<PolicyFetchResult>;
  /** Whether a capability this client fetched was in the platform-wide log-only mode then (decision 2761). */
  inLogOnlyMode?(capability: Capability): boolean;
  /**
   * Hands decision records (a JSON array's bytes) to the authority's audit log; resolves once it
   * took them. `exported`: this sidecar exported them itself, so the authority does not (decision 2797).
   */
  sendDecisions(records: Buffer, batch?: { readonly exported: boolean }): Promise<void>;
  /**
   * Proves the sidecar's own credentials (`GET /v1/sidecar/self`): resolves when the authority
   * accepts them, with the partner the authority knows them by (undefined for none); an
   * AuthorityFetchError carries the authority's status and error code.
   */
  proveCredentials(): Promise<{ readonly partnerId: string | undefined }>;
}

export interface AuthorityClientOptions {
  /** e.g. http://127.0.0.1:8080 */
  readonly baseUrl: string;
  readonly token: ServiceTokenSource;
  /** Deadline of one call (default 2000 ms). */
  readonly timeoutMs?: number;
  /** The transport (the sidecar's: createNodeJsonFetch). Default: the global fetch. */
  readonly fetch?: JsonFetch;
}

function stringMap(value: unknown): Record<string, string> | undefined {
  if (!isRecord(value)) return undefined;
  const out: Record<string, string> = {};
  for (const [key, item] of Object.entries(value)) {
    if (typeof item !== "string") return undefined;
    out[key] = item;
  }
  return out;
}

/** The fields the sidecar relies on, checked: the network is not trusted for shape. */
function policyRecordOf(value: unknown): PolicyRecordFacts | undefined {
  if (!isRecord(value)) return undefined;
  const ok =
    typeof value.subject_id === "string" &&
    typeof value.partner_id === "string" &&
    (value.crypto_version === "subject_credentials_v1" || value.crypto_version === "platform_service_v2") &&
    typeof value.document_hash === "string" &&
    typeof value.head === "number" &&
    Number.isSafeInteger(value.head) &&
    value.head >= 0 &&
    (value.revoked_at === null || value.revoked_at === undefined || typeof value.revoked_at === "string");
  return ok ? (value as unknown as PolicyRecordFacts) : undefined;
}

/** One entry of the policy change log, checked. */
function policyChangeOf(value: unknown): PolicyChange | undefined {
  if (!isRecord(value)) return undefined;
  const { subject_id: subjectId, head, document_hash: documentHash, revoked_at: revokedAt } = value;
  if (typeof subjectId !== "string" || subjectId.length === 0 || subjectId.length > 512) return undefined;
  if (typeof head !== "number" || !Number.isSafeInteger(head) || head < 0) return undefined;
  if (!(documentHash === null || typeof documentHash === "string")) return undefined;
  if (!(revokedAt === null || typeof revokedAt === "string")) return undefined;
  return { subject_id: subjectId, head, document_hash: documentHash, revoked_at: revokedAt };
}

const parseDecodingSignedPolicy = jsonParserDecodingBase64("signed_policy");

const RECORDS_OPEN = Buffer.from('{"records":');
const EXPORTED_RECORDS_OPEN = Buffer.from('{"exported":true,"records":');
const RECORDS_CLOSE = Buffer.from("}");

export function createAuthorityClient(options: AuthorityClientOptions): AuthorityClient {
  let base: URL;
  try {
    base = new URL(options.baseUrl);
  } catch {
    throw new SidecarConfigError("authority url is not a URL");
  }
  if (base.protocol !== "http:" && base.protocol !== "https:")
    throw new SidecarConfigError("authority url must be http(s)");
  if (typeof options.token?.token !== "function") throw new SidecarConfigError("token source is required");
  const timeoutMs = positiveIntOption(options.timeoutMs, 2000, "timeoutMs");
  const doFetch: JsonFetch = options.fetch ?? globalThis.fetch;
  const root = base.href.replace(/\/+$/, "");

  const call = async (
    path: string,
    headers: Record<string, string> = {},
    body?: Buffer,
    deadlineMs = timeoutMs,
  ): Promise<JsonAnswer> => {
    for (let attempt = 0; ; attempt++) {
      let token: string;
      try {
        token = await options.token.token();
      } catch (error) {
        throw new AuthorityFetchError("the sidecar's own token is unavailable", undefined, { cause: error });
      }
      let response: JsonAnswer;
      try {
        response = await doFetch(`${root}${path}`, {
          ...(body === undefined ? {} : { method: "POST" as const, body }),
          headers: {
            authorization: `Bearer ${token}`,
            accept: "application/json",
            ...(body === undefined ? {} : { "content-type": "application/json" }),
            ...headers,
            // With tracing on, a read made for a request (policy, catalog, credentials) is part
            // of its trace; a POST ships records of many requests and belongs to none.
            ...(body === undefined ? traceHeaders() : undefined),
          },
          redirect: "error",
          signal: AbortSignal.timeout(deadlineMs),
        });
      } catch (error) {
        throw new AuthorityFetchError("the authority service could not be reached", undefined, {
          cause: error,
        });
      }
      // One retry with a fresh token: a rotated or expired sidecar token is not an outage.
      if (response.status === 401 && attempt === 0) {
        await response.body?.cancel();
        options.token.invalidate();
        continue;
      }
      return response;
    }
  };

  const json = async (response: JsonAnswer): Promise<unknown> => {
    try {
      return await response.json();
    } catch (error) {
      throw new AuthorityFetchError("the authority service answered without JSON", response.status, {
        cause: error,
      });
    }
  };

  /**
   * A policy answer's JSON and its signed policy: the 0.5 MB `signed_policy` (500 operations)
   * decoded from the bytes when the transport has them (the blob, no string made; decision
   * 3131), otherwise the body's JSON and its base64 string.
   */
  const policyJson = async (response: JsonAnswer): Promise<{ body: unknown; signedPolicy: unknown }> => {
    if (response.bytes === undefined) {
      const body = await json(response);
      return { body, signedPolicy: isRecord(body) ? body.signed_policy : undefined };
    }
    const bytes = await response.bytes();
    let parsed: ReturnType<typeof parseDecodingSignedPolicy>;
    try {
      parsed = parseDecodingSignedPolicy(bytes);
    } catch (error) {
      throw new AuthorityFetchError("the authority service answered without JSON", response.status, {
        cause: error,
      });
    }
    const { json: body, decoded } = parsed;
    return { body, signedPolicy: decoded ?? (isRecord(body) ? body.signed_policy : undefined) };
  };

  const unexpected = async (response: JsonAnswer): Promise<never> => {
    await response.body?.cancel();
    throw new AuthorityFetchError(`the authority service answered ${response.status}`, response.status);
  };

  const segment = encodeURIComponent;

  /** The authority's own error code (`invalid_token`, `insufficient_role`…): safe to log, never a secret. */
  const refusal = async (response: JsonAnswer): Promise<never> => {
    let code: string | undefined;
    try {
      const body = (await response.json()) as unknown;
      if (isRecord(body) && typeof body.error === "string" && /^[a-z_]{1,64}$/.test(body.error))
        code = body.error;
    } catch {
      // no JSON: the status says enough
    }
    throw new AuthorityFetchError(
      `the authority service refused the sidecar's credentials (${response.status}${code === undefined ? "" : ` ${code}`})`,
      response.status,
    );
  };

  /** 200: true; 404: false, its body discarded; anything else is an unexpected answer. */
  const found = async (response: JsonAnswer): Promise<boolean> => {
    if (response.status === 404) {
      await response.body?.cancel();
      return false;
    }
    if (response.status !== 200) await unexpected(response);
    return true;
  };

  /** A policy answer (200 or 404) of the sidecar policy routes, checked. */
  const policyAnswer = async (response: JsonAnswer): Promise<PolicyFetchResult> => {
    if (response.status === 404) {
      await response.body?.cancel();
      return { status: "not_found" };
    }
    if (response.status !== 200) return unexpected(response);
    const { body, signedPolicy } = await policyJson(response);
    const subject = isRecord(body) ? body.subject : undefined;
    const record = isRecord(body) ? policyRecordOf(body.policy) : undefined;
    if (
      !isRecord(subject) ||
      typeof subject.partner_id !== "string" ||
      record === undefined ||
      !(
        signedPolicy === null ||
        (typeof signedPolicy === "string" && signedPolicy.length > 0) ||
        (signedPolicy instanceof Uint8Array && signedPolicy.length > 0)
      )
    ) {
      throw new AuthorityFetchError("the policy answer is malformed", 200);
    }
    // An authority that does not say which principals the subject admits: the strictest kind.
    const identity = isSubjectIdentity(subject.identity) ? subject.identity : "partner_token";
    return { status: "found", record, signedPolicy, partnerId: subject.partner_id, identity };
  };

  /** The capabilities this client fetched in the log-only mode (by object: a fetched one is kept as it came). */
  const logOnlyCapabilities = new WeakSet<Capability>();

  return {
    inLogOnlyMode: (capability) => logOnlyCapabilities.has(capability),
    async proveCredentials() {
      const response = await call("/v1/sidecar/self");
      if (response.status === 401 || response.status === 403) return refusal(response);
      if (response.status !== 200) return unexpected(response);
      const body: unknown = await response.json().catch(() => undefined);
      const partnerId = isRecord(body) ? body.partner_id : undefined;
      return { partnerId: typeof partnerId === "string" ? partnerId : undefined };
    },
    async sendDecisions(records, batch) {
      const open = batch?.exported === true ? EXPORTED_RECORDS_OPEN : RECORDS_OPEN;
      const body = Buffer.concat([open, records, RECORDS_CLOSE]);
      const response = await call("/v1/sidecar/decisions", {}, body);
      if (response.status !== 200) await unexpected(response);
      await response.body?.cancel();
    },
    async fetchPolicy(subjectId, { knownHead }): Promise<PolicyFetchResult> {
      const response = await call(
        `/v1/sidecar/policies/${segment(subjectId)}`,
        knownHead === undefined ? {} : { "if-none-match": `"${knownHead}"` },
      );
      if (response.status === 304) {
        await response.body?.cancel();
        return { status: "not_modified" };
      }
      return policyAnswer(response);
    },

    fetchShadowPolicy: async (subjectId) =>
      policyAnswer(await call(`/v1/sidecar/shadow-policies/${segment(subjectId)}`)),

    async fetchPolicyChanges(after, options): Promise<PolicyChangesPage> {
      const query = new URLSearchParams({ instance: options.instance, wait: String(options.wait) });
      if (after !== undefined) query.set("after", String(after));
      const response = await call(`/v1/sidecar/policy-changes?${query}`, {}, undefined, options.timeoutMs);
      if (response.status !== 200) return unexpected(response);
      const body = await json(response);
      const changes = isRecord(body) && Array.isArray(body.changes) ? body.changes.map(policyChangeOf) : [];
      if (!isRecord(body) || changes.some((change) => change === undefined)) {
        throw new AuthorityFetchError("the policy change log answer is malformed", 200);
      }
      return { ...(body as unknown as PolicyChangesPage), changes: changes as PolicyChange[] };
    },

    async fetchPolicyKeys(owner): Promise<PublicKeyRingJson | undefined> {
      const response = await call(`/v1/sidecar/policy-keys/${segment(owner)}`);
      if (!(await found(response))) return undefined;
      const body = await json(response);
      if (!isRecord(body) || body.format !== PUBLIC_KEYS_FORMAT || body.owner !== owner) {
        throw new AuthorityFetchError("the policy keys answer is malformed", 200);
      }
      return body as unknown as PublicKeyRingJson;
    },

    async fetchCapability(partnerId, capabilityId) {
      const response = await call(`/v1/sidecar/capabilities/${segment(partnerId)}/${segment(capabilityId)}`);
      if (!(await found(response))) return undefined;
      const body = await json(response);
      try {
        const capability = validateCapability(isRecord(body) ? body.capability : undefined);
        if (capability.capability_id !== capabilityId || capability.partner_id !== partnerId)
          return undefined;
        if (isRecord(body) && body.log_only === true) logOnlyCapabilities.add(capability);
        return capability;
      } catch (error) {
        throw new AuthorityFetchError("the capability answer is malformed", 200, { cause: error });
      }
    },

    async fetchCredentials(partnerId, profileId) {
      const response = await call(`/v1/sidecar/auth-profiles/${segment(partnerId)}/${segment(profileId)}`);
      if (response.status !== 200) return unexpected(response);
      const body = await json(response);
      const headers = isRecord(body) ? stringMap(body.headers) : undefined;
      const query = isRecord(body) ? stringMap(body.query) : undefined;
      const expiresIn = isRecord(body) ? body.expires_in : undefined;
      if (
        headers === undefined ||
        query === undefined ||
        typeof expiresIn !== "number" ||
        !(expiresIn >= 0)
      ) {
        throw new AuthorityFetchError("the credentials answer is malformed", 200);
      }
      return { headers, query, ttlMs: Math.min(expiresIn, 3600) * 1000 };
    },
  };
}
