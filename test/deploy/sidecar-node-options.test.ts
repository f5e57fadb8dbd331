import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { describe, it } from "node:test";
import { SIDECAR_GLIBC_TUNABLES, SIDECAR_NODE_OPTIONS } from "../../src/servers/inject/patch.ts";
import { defaultSidecarResources } from "../../src/servers/inject/settings.ts";

/**
 * The sidecar's Node settings are written in three places that must agree: the injector's
 * NODE_OPTIONS, the image build that fills Node's compile cache with them (Node keys the cache
 * by V8 flags: with other flags every module is compiled again at start, and TypeScript is
 * stripped by a ≈ 17 MB WebAssembly compiler), and the hand-written example manifest. The
 * chart's injected memory request and limit are the injector's defaults (docs/sidecar.md,
 * "Memory", says where the figures come from).
 */
describe("the sidecar's Node settings and memory", () => {
  it("the image fills its compile cache with the injector's NODE_OPTIONS", async () => {
    const containerfile = await readFile("deploy/Containerfile", "utf8");
    assert.match(
      containerfile,
      new RegExp(`RUN NODE_OPTIONS="${SIDECAR_NODE_OPTIONS}" node scripts/warm-compile-cache\\.ts`),
    );
  });

  it("the example manifest's sidecar runs with them", async () => {
    const manifest = await readFile("deploy/kubernetes/example-app.yaml", "utf8");
    assert.match(manifest, new RegExp(`- name: NODE_OPTIONS\\n\\s+value: ${SIDECAR_NODE_OPTIONS}\\n`));
    assert.match(manifest, new RegExp(`- name: GLIBC_TUNABLES\\n\\s+value: ${SIDECAR_GLIBC_TUNABLES}\\n`));
  });

  it("the chart's injected resources are the injector's defaults", async () => {
    const values = await readFile("charts/authority/values.yaml", "utf8");
    const injected =
      /# -- Resources of the injected container\.[^\n]*\n(?:\s*#[^\n]*\n)*\s+resources:\n\s+requests:\n\s+cpu: (\S+)\n\s+memory: (\S+)\n\s+limits:\n\s+memory: (\S+)\n/.exec(
        values,
      );
    assert.ok(injected !== null, "sidecar.resources in values.yaml");
    assert.deepEqual(
      { cpu: injected[1], memory: injected[2], limit: injected[3] },
      {
        cpu: defaultSidecarResources.requests?.cpu,
        memory: defaultSidecarResources.requests?.memory,
        limit: defaultSidecarResources.limits?.memory,
      },
    );
  });
});
