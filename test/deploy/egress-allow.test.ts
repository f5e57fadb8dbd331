import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parse } from "yaml";
import { resolveAuthorityConfig } from "../../src/config/authority.ts";
import { reviewAdmission } from "../../src/servers/inject/admission.ts";
import { InjectorSettingsError, parseSidecarSettings } from "../../src/servers/inject/settings.ts";
import { resolveSidecarConfig } from "../../src/servers/sidecar/config.ts";
import { containersOf, initContainersOf, loadReview } from "../servers/inject/fixtures.ts";
import { applyJsonPatch } from "../servers/inject/json-patch.ts";
import { isObj, type Obj } from "./helpers.ts";
import { renderChart, renderError } from "./rendered-pod.ts";

/**
 * `egress.allow` of the chart reaches the authority service (its ConfigMap) and every injected
 * sidecar (the injector's settings file, then the pod patch) as AUTHORITY_EGRESS_ALLOW, and each
 * process parses it into the same entries. Unset, neither gets one: nothing beyond public
 * addresses is reachable.
 */

const ALLOW = ["10.96.0.0/12", "10.1.2.3:8080", "[fd00::1]:443", "orders.shop.svc.cluster.local:8080"];

function configMapData(objects: readonly Obj[], has: string): Obj | undefined {
  const found = objects.find((o) => o.kind === "ConfigMap" && isObj(o.data) && has in o.data);
  return found === undefined ? undefined : (found.data as Obj);
}

/** The env of the sidecar the injector puts into a plain pod, with these chart objects. */
function injectedSidecarEnv(objects: readonly Obj[]): Record<string, string> {
  const data = configMapData(objects, "settings.yaml");
  assert.ok(data !== undefined);
  const settings = parseSidecarSettings(parse(String(data["settings.yaml"])), { version: "0.0.0" });
  const review = loadReview("plain-pod");
  const outcome = reviewAdmission(review, settings);
  assert.equal(outcome.result, "injected");
  const patch = JSON.parse(Buffer.from(outcome.review.response.patch ?? "", "base64").toString("utf8"));
  const pod = applyJsonPatch(review.request.object, patch);
  const container = [...initContainersOf(pod), ...containersOf(pod)].find(
    (c) => c.name === "authority-sidecar",
  );
  assert.ok(container !== undefined);
  const env: Record<string, string> = {};
  for (const entry of (container.env ?? []) as Obj[]) {
    if (typeof entry.value === "string") env[String(entry.name)] = entry.value;
  }
  return env;
}

describe("chart: egress.allow", () => {
  it("renders into the authority's settings and the injected sidecar's, which parse it to the same entries", async () => {
    const objects = await renderChart(["--set-json", `egress.allow=${JSON.stringify(ALLOW)}`]);
    const authorityData = configMapData(objects, "AUTHORITY_LISTEN");
    assert.ok(authorityData !== undefined);
    const authority = resolveAuthorityConfig({
      env: {
        AUTHORITY_EGRESS_ALLOW: String(authorityData.AUTHORITY_EGRESS_ALLOW),
        AUTHORITY_POLICY_PROTECTION: "embedded",
      },
    });
    assert.deepEqual(
      authority.egress.allow.map((e) => e.text),
      ALLOW,
    );

    const sidecarEnv = injectedSidecarEnv(objects);
    const sidecar = resolveSidecarConfig({
      env: { AUTHORITY_SIDECAR_TOKEN_FILE: "/var/run/secrets/authority/token", ...sidecarEnv },
    });
    assert.deepEqual(
      sidecar.egressAllow.map((e) => e.text),
      ALLOW,
    );
  });

  it("is empty by default: neither process is given an allow list", async () => {
    const objects = await renderChart([]);
    assert.equal(configMapData(objects, "AUTHORITY_LISTEN")?.AUTHORITY_EGRESS_ALLOW, undefined);
    assert.equal(injectedSidecarEnv(objects).AUTHORITY_EGRESS_ALLOW, undefined);
  });

  it("refuses a wildcard at render, and the injector refuses an entry the sidecar would", async () => {
    const error = await renderError(["--set-json", 'egress.allow=["*.shop.svc.cluster.local"]']);
    assert.ok(error?.includes("egress"), error);
    // Passes the schema's shape, but host bits set below the prefix: the injector's start fails.
    const objects = await renderChart(["--set-json", 'egress.allow=["10.0.0.1/8"]']);
    const data = configMapData(objects, "settings.yaml");
    assert.throws(
      () => parseSidecarSettings(parse(String(data?.["settings.yaml"])), { version: "0.0.0" }),
      (e) => e instanceof InjectorSettingsError && e.message.includes("egressAllow[0]"),
    );
  });
});
