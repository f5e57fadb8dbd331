import { isRecord as isObj } from "../../core/own-property.ts";
import { AuthorityError } from "../../errors.ts";
import { type NamespaceContext, PodAnnotationError, planInjection, type SkipReason } from "./patch.ts";
import type { SidecarSettings } from "./settings.ts";

/**
 * admission.k8s.io/v1 AdmissionReview in, AdmissionReview out. Pure: the webhook server
 * only moves bytes. Malformed reviews throw AuthorityError("invalid_request") so the
 * server answers 400; everything well-formed gets an AdmissionReview back.
 */

export interface AdmissionResponse {
  readonly uid: string;
  readonly allowed: boolean;
  readonly patchType?: "JSONPatch";
  /** base64 of the JSON-encoded RFC 6902 patch. */
  readonly patch?: string;
  readonly warnings?: string[];
  readonly status?: { readonly code: number; readonly message: string };
}

export interface AdmissionReviewResponse {
  readonly apiVersion: "admission.k8s.io/v1";
  readonly kind: "AdmissionReview";
  readonly response: AdmissionResponse;
}

/** What happened, for the server's log line (no pod contents). */
export interface AdmissionOutcome {
  readonly review: AdmissionReviewResponse;
  readonly result: "injected" | "skipped" | "ignored" | "refused";
  readonly reason?: SkipReason | "not_a_pod" | "not_create" | "subresource" | "invalid_annotation";
  readonly namespace: string | undefined;
  readonly name: string | undefined;
}

const bad = (message: string): AuthorityError => new AuthorityError("invalid_request", message);

const reviewOf = (response: AdmissionResponse): AdmissionReviewResponse => ({
  apiVersion: "admission.k8s.io/v1",
  kind: "AdmissionReview",
  response,
});

export function reviewAdmission(
  body: unknown,
  settings: SidecarSettings,
  namespaceContext: NamespaceContext = { istioInjection: false },
): AdmissionOutcome {
  if (!isObj(body)) throw bad("body must be a JSON AdmissionReview object");
  if (body.apiVersion !== "admission.k8s.io/v1") throw bad("apiVersion must be admission.k8s.io/v1");
  if (body.kind !== "AdmissionReview") throw bad("kind must be AdmissionReview");
  const request = body.request;
  if (!isObj(request)) throw bad("request is missing");
  const uid = request.uid;
  if (typeof uid !== "string" || uid.length === 0) throw bad("request.uid must be a non-empty string");
  const kind = request.kind;
  if (!isObj(kind) || typeof kind.kind !== "string") throw bad("request.kind must name a kind");
  const namespace = typeof request.namespace === "string" ? request.namespace : undefined;
  const requestName = typeof request.name === "string" && request.name.length > 0 ? request.name : undefined;
  const base = { namespace, name: requestName };
  const allow = (reason: AdmissionOutcome["reason"]): AdmissionOutcome => ({
    ...base,
    review: reviewOf({ uid, allowed: true }),
    result: "ignored",
    reason,
  });

  // The webhook's rules select Pods only; anything else is let through untouched.
  if (kind.kind !== "Pod" || (kind.group ?? "") !== "") return allow("not_a_pod");
  if (typeof request.subResource === "string" && request.subResource.length > 0) return allow("subresource");
  if (request.operation !== "CREATE") return allow("not_create");
  const pod = request.object;
  if (!isObj(pod)) throw bad("request.object must be the Pod being created");
  const metadata = isObj(pod.metadata) ? pod.metadata : {};
  const name =
    base.name ??
    (typeof metadata.name === "string"
      ? metadata.name
      : typeof metadata.generateName === "string"
        ? `${metadata.generateName}*`
        : undefined);

  try {
    const plan = planInjection(pod, settings, namespaceContext);
    if (plan.skipped !== undefined) {
      return {
        review: reviewOf({ uid, allowed: true }),
        result: "skipped",
        reason: plan.skipped,
        namespace,
        name,
      };
    }
    const patch = Buffer.from(JSON.stringify(plan.patch), "utf8").toString("base64");
    const response: AdmissionResponse = {
      uid,
      allowed: true,
      patchType: "JSONPatch",
      patch,
      ...(plan.warnings.length > 0 ? { warnings: plan.warnings } : {}),
    };
    return { review: reviewOf(response), result: "injected", namespace, name };
  } catch (error) {
    if (!(error instanceof PodAnnotationError)) throw error;
    // The pod asked for the sidecar with a broken annotation: refusing says so at `kubectl apply`.
    return {
      review: reviewOf({ uid, allowed: false, status: { code: 400, message: error.message } }),
      result: "refused",
      reason: "invalid_annotation",
      namespace,
      name,
    };
  }
}
