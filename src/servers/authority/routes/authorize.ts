import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { RECEIPT_HEADER } from "../../../audit/receipts.ts";
import { AuthorityError, denyOutcome } from "../../../errors.ts";
import type { Principal } from "../../../identity/principal.ts";
import { authorizeInvocation, type InvocationResult } from "../../../pipeline/authorize.ts";
import { allowRef, denyOrErrorRef, denyRef } from "../../http/openapi.ts";
import { optionalPrincipal } from "../authenticate.ts";
import type { AuthorityContext } from "../context.ts";
import type { AuthorityServices } from "../services.ts";

/**
 * POST /v1/authorize-invocation — allow or deny one operation for the authenticated
 * subject. The outcome body is the spec's Allow or Deny object; the HTTP status is the
 * deny reason's (src/errors.ts), 200 for an allow, 503 `upstream_unavailable` when the
 * store, the policy keys, the issuer's keys or the audit log are unavailable (500 `internal`
 * for a fault). docs/authorize.md.
 */

interface AuthorizeBody {
  readonly subject?: { readonly subject_id: string };
  readonly capability_id?: string;
  readonly method: string;
  readonly path: string;
}

const bodySchema = {
  type: "object",
  additionalProperties: false,
  required: ["method", "path"],
  properties: {
    subject: {
      type: "object",
      additionalProperties: false,
      required: ["subject_id"],
      properties: { subject_id: { type: "string", minLength: 1, maxLength: 1024 } },
    },
    capability_id: { type: "string", maxLength: 256 },
    method: { type: "string", minLength: 1, maxLength: 16 },
    path: { type: "string", minLength: 1, maxLength: 8192 },
  },
} as const;

type Authentication =
  | { readonly kind: "ok"; readonly principal: Principal }
  | { readonly kind: "none" }
  | { readonly kind: "rejected" }
  | { readonly kind: "unavailable" };

/**
 * Step 1: a missing or rejected bearer token is no subject (a rejected one is answered
 * `invalid_token`); unreachable issuer keys are an outage.
 */
async function authenticate(request: FastifyRequest, context: AuthorityContext): Promise<Authentication> {
  try {
    const principal = await optionalPrincipal(request, context);
    return principal === undefined ? { kind: "none" } : { kind: "ok", principal };
  } catch (error) {
    if (error instanceof AuthorityError && error.code === "upstream_unavailable")
      return { kind: "unavailable" };
    return { kind: "rejected" };
  }
}

function body(result: InvocationResult, requestId: string): object {
  return result.outcome.status === "allowed"
    ? { status: "allowed", permissionId: result.outcome.permissionId, requestId }
    : denyOutcome(result.outcome.reason, requestId, result.outcome.explanation);
}

export function authorizeRoutes(context: AuthorityServices): FastifyPluginAsync {
  return async (app) => {
    app.post<{ Body: AuthorizeBody }>(
      "/v1/authorize-invocation",
      {
        schema: {
          body: bodySchema,
          response: {
            200: allowRef,
            401: denyRef,
            403: denyRef,
            "4XX": denyOrErrorRef,
            "5XX": denyOrErrorRef,
          },
        },
      },
      async (request, reply) => {
        const runtime = context.decisions;
        const auth = await authenticate(request, context);
        const principal = auth.kind === "ok" ? auth.principal : undefined;
        const result = await authorizeInvocation(runtime, {
          transport: "http",
          requestId: request.id,
          now: context.now(),
          actor: principal?.subject ?? null,
          subjectId: principal?.subject,
          authenticatedAs: {
            via: "bearer",
            partnerId: principal?.partnerId,
            vouchable: principal?.vouchable ?? false,
          },
          claimedSubjectId: request.body.subject?.subject_id,
          capabilityId: request.body.capability_id,
          method: request.body.method,
          path: request.body.path,
          // The spec's form names the template; it reaches no upstream, so its braces are placeholders.
          pathIsTemplate: typeof request.body.path === "string" && request.body.path.includes("{"),
          authenticationUnavailable: auth.kind === "unavailable",
          tokenRejected: auth.kind === "rejected",
        });
        if (result.httpStatus === 503) reply.header("retry-after", "1");
        if (result.receipt !== undefined) reply.header(RECEIPT_HEADER, result.receipt);
        if (result.outcome.status === "denied" && result.outcome.reason === "invalid_token") {
          reply.header("www-authenticate", 'Bearer realm="authority", error="invalid_token"');
        }
        return reply.code(result.httpStatus).send(body(result, request.id));
      },
    );
  };
}
