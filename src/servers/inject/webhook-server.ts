import type { Server as HttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import Fastify, { type FastifyError, type FastifyInstance, type FastifyRequest } from "fastify";
import type { Registry } from "prom-client";
import { AuthorityError, toAuthorityError } from "../../errors.ts";
import type { Logger } from "../../observability/logger.ts";
import { installHttpMetrics } from "../http/metrics.ts";
import { reviewAdmission } from "./admission.ts";
import { createInjectorMetrics, type InjectorMetrics } from "./metrics.ts";
import type { SidecarSettings } from "./settings.ts";

/**
 * The mutating admission webhook over HTTPS: `POST /mutate` (AdmissionReview v1),
 * `GET /healthz` and, given a registry, `GET /metrics`. The API server only talks TLS to
 * webhooks, so there is no plain mode.
 */

export interface TlsMaterial {
  readonly cert: string | Buffer;
  readonly key: string | Buffer;
}

export interface WebhookServerOptions {
  readonly tls: TlsMaterial;
  readonly settings: SidecarSettings;
  readonly logger?: Logger | undefined;
  /** Where the injector's series go; `GET /metrics` serves it. Without one: no metrics. */
  readonly metrics?: Registry | undefined;
  /** AdmissionReviews carry the whole Pod; etcd's object limit is 1.5 MiB. */
  readonly bodyLimit?: number | undefined;
}

export interface WebhookServer {
  readonly app: FastifyInstance<HttpsServer>;
  /** Resolves with the bound address, e.g. `https://127.0.0.1:43121`. */
  listen(host: string, port: number): Promise<{ url: string; port: number }>;
  /** Swaps the certificate without dropping the listener (cert-manager rotates it). */
  reloadTls(tls: TlsMaterial): void;
  close(): Promise<void>;
}

export class WebhookOptionsError extends Error {
  readonly code = "invalid_webhook_options";
  constructor(message: string) {
    super(message);
    this.name = "WebhookOptionsError";
  }
}

/** Called by the chart's webhooks for namespaces labelled for Istio injection. */
export const istioNamespaceMutatePath = "/mutate/istio-namespace";

const defaultBodyLimit = 3 * 1024 * 1024;

function checkOptions(options: WebhookServerOptions): void {
  const empty = (v: string | Buffer) => (typeof v === "string" ? v.trim().length === 0 : v.length === 0);
  if (empty(options.tls.cert) || empty(options.tls.key)) {
    throw new WebhookOptionsError("a TLS certificate and key are required");
  }
  const limit = options.bodyLimit;
  if (limit !== undefined && (!Number.isInteger(limit) || limit < 1024)) {
    throw new WebhookOptionsError("bodyLimit must be an integer of at least 1024 bytes");
  }
}

export function createWebhookServer(options: WebhookServerOptions): WebhookServer {
  checkOptions(options);
  const { settings } = options;
  const app = Fastify({
    https: { cert: options.tls.cert, key: options.tls.key },
    bodyLimit: options.bodyLimit ?? defaultBodyLimit,
    ...(options.logger === undefined ? { logger: false } : { loggerInstance: options.logger }),
    disableRequestLogging: true,
  }) as unknown as FastifyInstance<HttpsServer>;

  app.setErrorHandler((error: FastifyError | AuthorityError, _request, reply) => {
    if (error instanceof AuthorityError) return reply.status(error.status).send(error.toJSON());
    const status = error.statusCode;
    if (status !== undefined && status >= 400 && status < 500) {
      // Fastify's own body errors (bad JSON, empty body, wrong media type, too large).
      const code = status === 413 ? "payload_too_large" : "invalid_request";
      return reply.status(status).send({ error: code, message: error.message });
    }
    const wrapped = toAuthorityError(error);
    app.log.error({ err: error }, "admission webhook failure");
    return reply.status(wrapped.status).send(wrapped.toJSON());
  });

  app.setNotFoundHandler((_request, reply) =>
    reply.status(404).send(new AuthorityError("not_found").toJSON()),
  );

  app.get("/healthz", async () => ({ status: "ok" }));

  let metrics: InjectorMetrics | undefined;
  if (options.metrics !== undefined) {
    installHttpMetrics(app, { namespace: "authority_injector", registry: options.metrics });
    metrics = createInjectorMetrics(options.metrics);
    metrics.servingCertificate(options.tls.cert);
  }

  // One path per namespace case: the chart's webhooks select namespaces by their Istio labels
  // (the AdmissionReview does not carry them) and call the path that says which case matched.
  const mutate = (istioInjection: boolean) => async (request: FastifyRequest) => {
    const outcome = reviewAdmission(request.body, settings, { istioInjection });
    metrics?.admitted(outcome);
    request.log.info(
      {
        namespace: outcome.namespace,
        pod: outcome.name,
        result: outcome.result,
        reason: outcome.reason,
        istioNamespace: istioInjection,
      },
      "admission review",
    );
    return outcome.review;
  };
  app.post("/mutate", mutate(false));
  app.post(istioNamespaceMutatePath, mutate(true));

  return {
    app,
    async listen(host, port) {
      await app.listen({ host, port });
      const address = app.server.address() as AddressInfo;
      const shownHost = address.family === "IPv6" ? `[${address.address}]` : address.address;
      return { url: `https://${shownHost}:${address.port}`, port: address.port };
    },
    reloadTls(tls) {
      app.server.setSecureContext({ cert: tls.cert, key: tls.key });
      metrics?.servingCertificate(tls.cert);
    },
    close: () => app.close(),
  };
}
