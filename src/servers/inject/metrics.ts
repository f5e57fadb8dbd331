import { X509Certificate } from "node:crypto";
import type { Registry } from "prom-client";
import { counter, gauge } from "../../observability/metrics.ts";
import type { AdmissionOutcome } from "./admission.ts";

/**
 * The injector's own series (beside `authority_injector_http_*` and the process defaults):
 * what admission reviews ended in, and when the serving certificate expires — a webhook whose
 * certificate lapsed refuses every opted-in pod (failurePolicy Fail) with no other sign.
 * Label values come from the closed sets of AdmissionOutcome.
 */
export interface InjectorMetrics {
  admitted(outcome: Pick<AdmissionOutcome, "result" | "reason">): void;
  /** The certificate now served (PEM; the first certificate of a chain is the leaf). */
  servingCertificate(cert: string | Buffer): void;
}

export function createInjectorMetrics(registry: Registry): InjectorMetrics {
  const reviews = counter(
    registry,
    "authority_injector_admission_reviews_total",
    "Admission reviews answered, by result (injected, skipped, ignored, refused) and reason.",
    ["result", "reason"],
  );
  let notAfterSeconds = Number.NaN;
  gauge(
    registry,
    "authority_injector_tls_certificate_expiry_timestamp_seconds",
    "When the serving certificate the API server sees expires (Unix time, seconds).",
    [],
    (set) => set({}, notAfterSeconds),
  );
  return {
    admitted({ result, reason }) {
      reviews.inc({ result, reason: reason ?? "none" });
    },
    servingCertificate(cert) {
      notAfterSeconds = Math.floor(new X509Certificate(cert).validToDate.getTime() / 1000);
    },
  };
}
