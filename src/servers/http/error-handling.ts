import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { AuthorityError, type ErrorCode, toAuthorityError } from "../../errors.ts";

/**
 * One mapping from anything a route or fastify throws to the public error body
 * `{ error, message, details?, requestId }`. Stacks, causes and internal messages stay in
 * the log; a 5xx body never says more than the error table's public message.
 */
const fastifyCodeMap: Record<string, ErrorCode> = {
  FST_ERR_CTP_BODY_TOO_LARGE: "payload_too_large",
  FST_ERR_CTP_INVALID_MEDIA_TYPE: "unsupported_media_type",
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: "invalid_request",
  FST_ERR_CTP_EMPTY_JSON_BODY: "invalid_request",
  FST_ERR_CTP_INVALID_JSON_BODY: "invalid_request",
  FST_ERR_VALIDATION: "invalid_request",
  FST_ERR_INVALID_URL: "invalid_request",
};

const publicMessages: Partial<Record<string, string>> = {
  FST_ERR_CTP_EMPTY_JSON_BODY: "The JSON body is empty.",
  FST_ERR_CTP_INVALID_JSON_BODY: "The body is not valid JSON.",
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: "Content-Length does not match the body.",
};

type ValidationIssue = NonNullable<FastifyError["validation"]>[number];

/** The caller's own property name, bounded: it says which property without echoing a whole payload. */
function problemMessage(issue: ValidationIssue): string {
  const extra = (issue.params as { additionalProperty?: unknown } | undefined)?.additionalProperty;
  if (issue.keyword === "additionalProperties" && typeof extra === "string") {
    return `must NOT have the additional property ${JSON.stringify(extra.slice(0, 64))}`;
  }
  return issue.message ?? "is invalid";
}

function fromFastifyError(error: FastifyError): AuthorityError | undefined {
  const code = error.code === undefined ? undefined : fastifyCodeMap[error.code];
  if (code === undefined) {
    // Plain JSON.parse failures from the content-type parser carry no FST code.
    if (error instanceof SyntaxError)
      return new AuthorityError("invalid_request", "The body is not valid JSON.");
    return undefined;
  }
  if (error.code === "FST_ERR_VALIDATION" && Array.isArray(error.validation)) {
    const problems = error.validation.map((issue) => ({
      location: `${error.validationContext ?? "body"}${issue.instancePath}`,
      message: problemMessage(issue),
    }));
    return new AuthorityError("invalid_request", "The request does not match the schema.", {
      details: { problems },
    });
  }
  return new AuthorityError(code, error.code === undefined ? undefined : publicMessages[error.code]);
}

export function errorBody(error: AuthorityError, requestId: string): Record<string, unknown> {
  return { ...error.toJSON(), requestId };
}

export function sendError(reply: FastifyReply, request: FastifyRequest, error: AuthorityError): FastifyReply {
  return reply.code(error.status).type("application/json").send(errorBody(error, request.id));
}

export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((raw: FastifyError, request, reply) => {
    const error = fromFastifyError(raw) ?? toAuthorityError(raw);
    if (!error.callerFault) request.log.error({ err: raw, code: error.code }, "request failed");
    else request.log.info({ code: error.code, reason: error.details?.reason }, "request rejected");
    return sendError(reply, request, error);
  });
  app.setNotFoundHandler((request, reply) =>
    sendError(reply, request, new AuthorityError("not_found", "No such route.")),
  );
}
