import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { AuthorityError } from "../../../src/errors.ts";
import { reviewAdmission } from "../../../src/servers/inject/admission.ts";
import type { JsonPatchOperation } from "../../../src/servers/inject/patch.ts";
import { chartLikeSettings, containerNamed, loadReview, validatePod } from "./fixtures.ts";
import { applyJsonPatch } from "./json-patch.ts";

const decodePatch = (patch: string | undefined): JsonPatchOperation[] =>
  JSON.parse(Buffer.from(patch ?? "", "base64").toString("utf8")) as JsonPatchOperation[];

const invalidRequest = (message: RegExp) => (error: unknown) =>
  error instanceof AuthorityError && error.code === "invalid_request" && message.test(error.message);

describe("reviewAdmission", () => {
  it("answers a pod CREATE with the request uid, allowed and a base64 JSONPatch", () => {
    const review = loadReview("plain-pod");
    const outcome = reviewAdmission(review, chartLikeSettings);
    assert.equal(outcome.result, "injected");
    assert.equal(outcome.name, "checkout-6d5f8b7c9d-*");
    assert.equal(outcome.namespace, "shop");
    const { response } = outcome.review;
    assert.equal(outcome.review.apiVersion, "admission.k8s.io/v1");
    assert.equal(outcome.review.kind, "AdmissionReview");
    assert.equal(response.uid, review.request.uid);
    assert.equal(response.allowed, true);
    assert.equal(response.patchType, "JSONPatch");
    const patched = applyJsonPatch(review.request.object, decodePatch(response.patch));
    validatePod(patched);
    assert.ok(containerNamed(patched, "authority-sidecar"));
  });

  it("allows skipped pods without a patch", () => {
    for (const name of ["already-injected-pod", "opt-out-pod"] as const) {
      const review = loadReview(name);
      const { review: out, result } = reviewAdmission(review, chartLikeSettings);
      assert.equal(result, "skipped");
      assert.deepEqual(out.response, { uid: review.request.uid, allowed: true });
    }
  });

  it("lets other kinds, updates and subresources through untouched", () => {
    const deployment = loadReview("deployment");
    const outcome = reviewAdmission(deployment, chartLikeSettings);
    assert.equal(outcome.reason, "not_a_pod");
    assert.deepEqual(outcome.review.response, { uid: deployment.request.uid, allowed: true });

    const update = loadReview("plain-pod");
    update.request.operation = "UPDATE";
    assert.equal(reviewAdmission(update, chartLikeSettings).reason, "not_create");

    const sub = loadReview("plain-pod");
    sub.request.subResource = "ephemeralcontainers";
    assert.equal(reviewAdmission(sub, chartLikeSettings).reason, "subresource");
  });

  it("refuses a pod whose capability-map annotation is broken, with the reason", () => {
    const review = loadReview("plain-pod");
    (review.request.object.metadata as Record<string, unknown>).annotations = {
      "authority.io/capability-map": "[1,2]",
    };
    const outcome = reviewAdmission(review, chartLikeSettings);
    assert.equal(outcome.result, "refused");
    assert.equal(outcome.review.response.allowed, false);
    assert.equal(outcome.review.response.status?.code, 400);
    assert.match(outcome.review.response.status?.message ?? "", /authority\.io\/capability-map/);
  });

  it("rejects malformed reviews with invalid_request and a message naming the field", () => {
    assert.throws(
      () => reviewAdmission(null, chartLikeSettings),
      invalidRequest(/JSON AdmissionReview object/),
    );
    assert.throws(
      () => reviewAdmission([], chartLikeSettings),
      invalidRequest(/JSON AdmissionReview object/),
    );
    const v1beta1 = { ...loadReview("plain-pod"), apiVersion: "admission.k8s.io/v1beta1" };
    assert.throws(() => reviewAdmission(v1beta1, chartLikeSettings), invalidRequest(/apiVersion/));
    const wrongKind = { ...loadReview("plain-pod"), kind: "Pod" };
    assert.throws(() => reviewAdmission(wrongKind, chartLikeSettings), invalidRequest(/kind must be/));
    const noRequest = { apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview" };
    assert.throws(() => reviewAdmission(noRequest, chartLikeSettings), invalidRequest(/request is missing/));
    const noUid = loadReview("plain-pod");
    noUid.request.uid = "";
    assert.throws(() => reviewAdmission(noUid, chartLikeSettings), invalidRequest(/request\.uid/));
    const noObject = loadReview("plain-pod") as { request: Record<string, unknown> };
    delete noObject.request.object;
    assert.throws(() => reviewAdmission(noObject, chartLikeSettings), invalidRequest(/request\.object/));
    const noKind = loadReview("plain-pod") as { request: Record<string, unknown> };
    noKind.request.kind = "Pod";
    assert.throws(() => reviewAdmission(noKind, chartLikeSettings), invalidRequest(/request\.kind/));
  });
});
