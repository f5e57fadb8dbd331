import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { createMetricsRegistry } from "../../../src/observability/metrics.ts";
import type { JsonPatchOperation } from "../../../src/servers/inject/patch.ts";
import {
  createWebhookServer,
  WebhookOptionsError,
  type WebhookServer,
} from "../../../src/servers/inject/webhook-server.ts";
import {
  annotationsOf,
  chartLikeSettings,
  checkPodConsistency,
  containerNamed,
  fixtureNames,
  loadReview,
  validatePod,
} from "./fixtures.ts";
import { applyJsonPatch } from "./json-patch.ts";
import { httpsRequest, selfSignedCert } from "./tls.ts";

interface ReviewBody {
  apiVersion: string;
  kind: string;
  response: { uid: string; allowed: boolean; patchType?: string; patch?: string; warnings?: string[] };
}

describe("the admission webhook over HTTPS", () => {
  let server: WebhookServer;
  let url = "";
  let tls: Awaited<ReturnType<typeof selfSignedCert>>;

  before(async () => {
    tls = await selfSignedCert();
    server = createWebhookServer({ tls, settings: chartLikeSettings });
    url = (await server.listen("127.0.0.1", 0)).url;
  });
  after(() => server.close());

  const post = (body: string, contentType?: string) =>
    httpsRequest(`${url}/mutate`, {
      ca: tls.cert,
      method: "POST",
      body,
      ...(contentType === undefined ? {} : { contentType }),
    });

  it("serves /healthz with its certificate", async () => {
    const res = await httpsRequest(`${url}/healthz`, { ca: tls.cert });
    assert.equal(res.status, 200);
    assert.deepEqual(JSON.parse(res.body), { status: "ok" });
    assert.equal(res.peerFingerprint, tls.fingerprint);
  });

  it("mutates every fixture into a valid pod, and a second review of the result adds nothing", async () => {
    for (const name of fixtureNames) {
      const review = loadReview(name);
      const res = await post(JSON.stringify(review));
      assert.equal(res.status, 200, name);
      const answer = JSON.parse(res.body) as ReviewBody;
      assert.equal(answer.apiVersion, "admission.k8s.io/v1");
      assert.equal(answer.kind, "AdmissionReview");
      assert.equal(answer.response.uid, review.request.uid, name);
      assert.equal(answer.response.allowed, true, name);
      if (name === "deployment" || name === "already-injected-pod" || name === "opt-out-pod") {
        assert.equal(answer.response.patch, undefined, name);
        continue;
      }
      assert.equal(answer.response.patchType, "JSONPatch");
      const ops = JSON.parse(
        Buffer.from(answer.response.patch ?? "", "base64").toString(),
      ) as JsonPatchOperation[];
      const patched = applyJsonPatch(review.request.object, ops);
      validatePod(patched);
      checkPodConsistency(patched);
      assert.ok(containerNamed(patched, "authority-sidecar"), name);
      assert.equal(annotationsOf(patched)["authority.io/status"], "injected");

      const again = await post(
        JSON.stringify({ ...review, request: { ...review.request, object: patched } }),
      );
      const second = JSON.parse(again.body) as ReviewBody;
      assert.deepEqual(second.response, { uid: review.request.uid, allowed: true }, `${name} second pass`);
    }
  });

  it("answers malformed input with 400 and a clear message", async () => {
    const badJson = await post("{not json");
    assert.equal(badJson.status, 400);
    assert.equal(JSON.parse(badJson.body).error, "invalid_request");

    const wrongVersion = await post(
      JSON.stringify({ ...loadReview("plain-pod"), apiVersion: "admission.k8s.io/v1beta1" }),
    );
    assert.equal(wrongVersion.status, 400);
    assert.deepEqual(JSON.parse(wrongVersion.body), {
      error: "invalid_request",
      message: "apiVersion must be admission.k8s.io/v1",
    });

    const empty = await post("");
    assert.equal(empty.status, 400);
    assert.equal(JSON.parse(empty.body).error, "invalid_request");

    const text = await post("uid=1", "text/plain");
    assert.equal(text.status, 400);
    assert.equal(JSON.parse(text.body).message, "body must be a JSON AdmissionReview object");

    const form = await post("uid=1", "application/x-www-form-urlencoded");
    assert.equal(form.status, 415);
    assert.equal(JSON.parse(form.body).error, "invalid_request");
  });

  it("answers unknown paths with 404", async () => {
    const res = await httpsRequest(`${url}/validate`, { ca: tls.cert, method: "POST", body: "{}" });
    assert.equal(res.status, 404);
    assert.equal(JSON.parse(res.body).error, "not_found");
  });

  it("switches to a renewed certificate without restarting", async () => {
    const renewed = await selfSignedCert();
    server.reloadTls(renewed);
    const res = await httpsRequest(`${url}/healthz`, { ca: renewed.cert });
    assert.equal(res.status, 200);
    assert.equal(res.peerFingerprint, renewed.fingerprint);
    await assert.rejects(httpsRequest(`${url}/healthz`, { ca: tls.cert }));
    server.reloadTls(tls);
  });

  it("refuses to start without TLS material", () => {
    assert.throws(
      () => createWebhookServer({ tls: { cert: "", key: "" }, settings: chartLikeSettings }),
      WebhookOptionsError,
    );
  });
});

describe("the admission webhook's metrics", () => {
  let server: WebhookServer;
  let url = "";
  let tls: Awaited<ReturnType<typeof selfSignedCert>>;
  const sample = (text: string, series: string): number => {
    const line = text.split("\n").find((l) => l.startsWith(`${series} `));
    assert.ok(line !== undefined, series);
    return Number(line.slice(series.length + 1));
  };
  const scrape = async (): Promise<string> => (await httpsRequest(`${url}/metrics`, { ca: tls.cert })).body;

  before(async () => {
    tls = await selfSignedCert();
    server = createWebhookServer({ tls, settings: chartLikeSettings, metrics: createMetricsRegistry() });
    url = (await server.listen("127.0.0.1", 0)).url;
  });
  after(() => server.close());

  it("counts reviews by result and reason, and requests by route and status", async () => {
    const post = (body: string) => httpsRequest(`${url}/mutate`, { ca: tls.cert, method: "POST", body });
    assert.equal((await post(JSON.stringify(loadReview("plain-pod")))).status, 200);
    assert.equal((await post("{}")).status, 400);
    const text = await scrape();
    assert.equal(
      sample(text, 'authority_injector_admission_reviews_total{result="injected",reason="none"}'),
      1,
    );
    assert.equal(
      sample(text, 'authority_injector_http_requests_total{route="/mutate",method="POST",status="400"}'),
      1,
    );
  });

  it("exports the served certificate's expiry, and the renewed one's after a reload", async () => {
    const expiry = (pem: string) => Math.floor(new X509Certificate(pem).validToDate.getTime() / 1000);
    const series = "authority_injector_tls_certificate_expiry_timestamp_seconds";
    assert.equal(sample(await scrape(), series), expiry(tls.cert));
    const renewed = await selfSignedCert(undefined, new Date(Date.now() + 30 * 86_400_000));
    assert.notEqual(expiry(renewed.cert), expiry(tls.cert));
    server.reloadTls(renewed);
    tls = renewed; // the client now trusts the renewed certificate
    assert.equal(sample(await scrape(), series), expiry(renewed.cert));
  });

  it("serves no /metrics without a registry", async () => {
    const plain = createWebhookServer({ tls, settings: chartLikeSettings });
    try {
      const plainUrl = (await plain.listen("127.0.0.1", 0)).url;
      assert.equal((await httpsRequest(`${plainUrl}/metrics`, { ca: tls.cert })).status, 404);
    } finally {
      await plain.close();
    }
  });
});
