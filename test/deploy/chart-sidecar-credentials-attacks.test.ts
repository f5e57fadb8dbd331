/**
 * Attack pass on the chart's per-namespace sidecar credentials (decision 2601): two entries that
 * end up with one client id, or one namespace (one Secret name there), would register one client
 * with two partners' claims or a partner's namespace with platform-wide scopes, and the second
 * Secret would silently replace the first. The chart refuses both.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { renderChart, renderError } from "./rendered-pod.ts";

const entries = (list: unknown[]) => ["--set-json", `sidecarCredentials=${JSON.stringify(list)}`];

describe("chart: sidecar credentials are one client and one Secret per namespace", () => {
  it("refuses a client id that another entry's namespace already has", async () => {
    const error = await renderError(
      entries([
        { namespace: "team-a", partnerId: "p1", capabilities: ["c1"] },
        { namespace: "team-b", partnerId: "p2", capabilities: ["c2"], clientId: "sidecar-team-a" },
      ]),
    );
    assert.ok(error !== undefined, "rendered");
    assert.match(error, /sidecarCredentials\[team-b\]: client id sidecar-team-a is already/);
  });

  it("refuses a namespace listed twice (a platform-wide entry over a partner's)", async () => {
    const error = await renderError(
      entries([
        { namespace: "team-a", partnerId: "p1", capabilities: ["c1"] },
        { namespace: "team-a", platformWide: true, clientId: "ops" },
      ]),
    );
    assert.ok(error !== undefined, "rendered");
    assert.match(error, /sidecarCredentials\[team-a\]: the namespace is listed twice/);
  });

  it("renders distinct namespaces and client ids", async () => {
    const objects = await renderChart(
      entries([
        { namespace: "team-a", partnerId: "p1", capabilities: ["c1"] },
        { namespace: "team-b", partnerId: "p2", capabilities: ["c2"] },
      ]),
    );
    const secrets = objects.filter(
      (o) => o.kind === "Secret" && JSON.stringify(o.metadata).includes("sidecar-credentials"),
    );
    assert.equal(secrets.length, 2);
  });
});
