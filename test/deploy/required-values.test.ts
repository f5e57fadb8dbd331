import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parse } from "yaml";
import { at, loadYaml, type Obj } from "./helpers.ts";
import { configMapData, deploymentPod, renderChart, renderError } from "./rendered-pod.ts";

/**
 * The chart's values without a working default — the image (nobody publishes one for you)
 * and the issuer (the sidecars would ask a token of 127.0.0.1:8083 and never become ready) —
 * fail the render with a message naming them, instead of installing a broken system; with
 * only those two set it renders the whole system with them. `helm install` renders the same
 * templates, so it fails the same way before creating anything.
 */

const IMAGE = "registry.example.com/platform/authority";
const ISSUER = "https://login.example.com";
const appVersion = String(at(loadYaml("charts/authority/Chart.yaml"), ["appVersion"]));

describe("required values", () => {
  const cases: Array<[string, string[], RegExp]> = [
    ["nothing set", [], /image\.repository is required: build and push the image/],
    ["only the issuer", ["--set", `authority.issuer=${ISSUER}`], /image\.repository is required/],
    [
      "an empty repository",
      ["--set", "image.repository=", "--set", `authority.issuer=${ISSUER}`],
      /image\.repository is required/,
    ],
    [
      "only the image",
      ["--set", `image.repository=${IMAGE}`],
      /authority\.issuer is required: the URL of the OIDC issuer/,
    ],
    [
      "an empty issuer",
      ["--set", `image.repository=${IMAGE}`, "--set", "authority.issuer="],
      /authority\.issuer is required/,
    ],
  ];
  for (const [what, args, message] of cases) {
    it(`fail the render with ${what}, naming the value`, async () => {
      const error = await renderError(args, { required: false });
      assert.ok(error !== undefined, `${what}: rendered`);
      assert.match(error, message);
    });
  }

  it("refuse a repository with a tag in it and an issuer that is not a URL (values.schema.json)", async () => {
    const tagged = await renderError(["--set", `image.repository=${IMAGE}:1.0`]);
    assert.match(String(tagged), /at .\/image\/repository.: .*does not match pattern/);
    const notUrl = await renderError(["--set", "authority.issuer=login.example.com"]);
    assert.match(String(notUrl), /at .\/authority\/issuer.: .*does not match pattern/);
  });

  it("with only the image and the issuer set, render every process with them", async () => {
    const objects = await renderChart(
      ["--set", `image.repository=${IMAGE}`, "--set", `authority.issuer=${ISSUER}`],
      {
        required: false,
      },
    );
    const image = `${IMAGE}:${appVersion}`;
    for (const name of ["authority", "authority-injector"]) {
      assert.equal(deploymentPod(objects, name).container.image, image, name);
    }
    assert.equal(configMapData(objects, "authority").AUTHORITY_ISSUER, ISSUER);
    // what the injector gives every sidecar
    const settings = parse(String(configMapData(objects, "authority-injector")["settings.yaml"])) as Obj;
    assert.equal(settings.image, image);
    assert.equal(settings.issuer, ISSUER);
  });

  it("take a tag or a digest beside the repository", async () => {
    const tagged = await renderChart(["--set", "image.tag=2026.11.1"]);
    assert.equal(deploymentPod(tagged, "authority").container.image, `${IMAGE}:2026.11.1`);
    const digest = `sha256:${"a".repeat(64)}`;
    const pinned = await renderChart(["--set", `image.digest=${digest}`]);
    assert.equal(deploymentPod(pinned, "authority").container.image, `${IMAGE}@${digest}`);
  });
});
