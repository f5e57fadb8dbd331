import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cp, readFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { parseDocument } from "yaml";
import { projectTool } from "../helpers/peer-process.ts";
import { makeTempDir, type TempDir } from "../helpers/temp-dir.ts";
import { isObj, type Obj, readRepoFile, repoPath } from "./helpers.ts";

/**
 * The release workflow (.github/workflows/release.yml), checked offline: no runner, registry or
 * QEMU here, so its structure is checked (trigger, least permissions, actions pinned by commit,
 * the build/push steps it needs, no expression expanded inside a script, secrets only where a
 * login reads them), every script is parsed by bash, and the steps that need no network are
 * run: the version check against the repository's real files, and the chart's lint and
 * `helm package` on the real chart, whose archive must be the one the push step names.
 */

const run = promisify(execFile);
const FILE = ".github/workflows/release.yml";
const text = readRepoFile(FILE);

interface Step {
  readonly name?: string;
  readonly id?: string;
  readonly uses?: string;
  readonly run?: string;
  readonly with?: Obj;
  readonly env?: Record<string, string>;
}

function parseWorkflow(): Obj {
  const doc = parseDocument(text, { uniqueKeys: true });
  assert.deepEqual(
    doc.errors.map((e) => e.message),
    [],
  );
  const value: unknown = doc.toJS();
  assert.ok(isObj(value));
  return value;
}

const workflow = parseWorkflow();
const jobs = workflow.jobs as Record<string, Obj>;
const steps: Step[] = Object.values(jobs).flatMap((job) => job.steps as Step[]);
const stepRunning = (pattern: RegExp): Step => {
  const found = steps.filter((s) => s.run !== undefined && pattern.test(s.run));
  assert.equal(found.length, 1, `one step runs ${pattern}`);
  return found[0] as Step;
};
const indexOf = (step: Step): number => steps.indexOf(step);
/** A GitHub Actions expression, as the workflow spells it. */
const expression = (inner: string): string => `\${{ ${inner} }}`;

async function bash(script: string, cwd: string, env: Record<string, string>) {
  return run("bash", ["-eo", "pipefail", "-c", script], {
    cwd,
    env: { PATH: `${repoPath(".tools/bin")}:${process.env.PATH ?? ""}`, ...env },
    timeout: 120_000,
  }).then(
    ({ stdout }) => ({ code: 0, stdout }),
    (error: { code?: number; stdout?: string }) => ({ code: error.code ?? -1, stdout: error.stdout ?? "" }),
  );
}

describe("the release workflow", () => {
  let dir: TempDir;
  before(async () => {
    dir = await makeTempDir("release-workflow-");
  });
  after(() => dir?.cleanup());

  it("runs on version tags only, with no permission by default and the job's least", () => {
    assert.deepEqual(workflow.on, { push: { tags: ["v[0-9]+.[0-9]+.[0-9]+*"] } });
    assert.deepEqual(workflow.permissions, {});
    assert.deepEqual(workflow.defaults, { run: { shell: "bash" } }, "bash -eo pipefail for every script");
    for (const [name, job] of Object.entries(jobs)) {
      assert.ok(isObj(job.permissions), `${name} states its permissions`);
      for (const [scope, level] of Object.entries(job.permissions)) {
        const allowed: Record<string, string> = { contents: "read", packages: "write" };
        assert.equal(level, allowed[scope], `${name}: ${scope}: ${String(level)}`);
      }
    }
  });

  it("uses actions pinned by commit, with the version as a comment, and keeps no git credential", () => {
    const uses = steps.flatMap((s) => (s.uses === undefined ? [] : [s.uses]));
    assert.ok(uses.length >= 2);
    for (const action of uses) {
      assert.match(action, /^[\w.-]+\/[\w.-]+@[0-9a-f]{40}$/, `${action} is pinned by a full commit SHA`);
      assert.match(
        text,
        new RegExp(`uses: ${action} # v\\d+\\.\\d+\\.\\d+\\n`),
        `${action} names its version`,
      );
    }
    const checkout = steps.find((s) => s.uses?.startsWith("actions/checkout@"));
    assert.equal(checkout?.with?.["persist-credentials"], false);
  });

  it("expands no expression inside a script, and gives secrets only to the login steps", () => {
    for (const step of steps) {
      if (step.run === undefined) continue;
      assert.ok(!step.run.includes("${{"), `${step.name}: values reach scripts through env only`);
      const secretEnv = Object.values(step.env ?? {}).some((v) => v.includes("secrets."));
      if (secretEnv)
        assert.match(step.run, /login .*--password-stdin/, `${step.name} reads its secret to log in`);
    }
    const outsideSteps = { ...workflow, jobs: Object.values(jobs).map(({ steps: _, ...job }) => job) };
    assert.ok(
      !JSON.stringify(outsideSteps).includes("secrets."),
      "no secret in a job's or the workflow's env",
    );
  });

  it("builds both architectures from deploy/Containerfile and pushes the image and the chart to the registry variable", () => {
    const job = Object.values(jobs)[0] as Obj;
    assert.equal((job.env as Obj).REGISTRY, expression("vars.RELEASE_REGISTRY"));
    const build = stepRunning(/buildah build /);
    assert.match(build.run ?? "", /--platform linux\/amd64,linux\/arm64 /);
    assert.match(build.run ?? "", /-f deploy\/Containerfile /);
    assert.match(build.run ?? "", /--ignorefile deploy\/Containerfile\.dockerignore /);
    const push = stepRunning(/buildah manifest push --all /);
    assert.match(push.run ?? "", /"docker:\/\/\$REGISTRY\/authority:\$VERSION"/);
    const qemu = stepRunning(/qemu-user-static/);
    const chartPush = stepRunning(/helm push /);
    assert.match(chartPush.run ?? "", /"dist\/authority-\$CHART_VERSION\.tgz" "oci:\/\/\$REGISTRY\/charts"/);
    const chartPackage = stepRunning(/helm package /);
    const version = steps.find((s) => s.id === "version");
    assert.ok(version !== undefined);
    assert.ok(
      indexOf(version) < indexOf(qemu) && indexOf(qemu) < indexOf(build) && indexOf(build) < indexOf(push),
    );
    assert.ok(indexOf(chartPackage) < indexOf(chartPush));
  });

  it("installs the Helm the suite tests with", async () => {
    const peers = await readFile(repoPath("scripts/ensure-test-peers.sh"), "utf8");
    const suiteHelm = /^HELM_VERSION=(\S+)$/m.exec(peers)?.[1];
    const job = Object.values(jobs)[0] as Obj;
    assert.equal((job.env as Obj).HELM_VERSION, suiteHelm);
    const setup = steps.find((s) => s.uses?.startsWith("azure/setup-helm@"));
    assert.equal(setup?.with?.version, expression("env.HELM_VERSION"));
  });

  it("has scripts bash parses", async () => {
    for (const step of steps) {
      if (step.run === undefined) continue;
      const parsed = await run("bash", ["-n", "-c", step.run]).then(
        () => "",
        (error: { stderr?: string }) => error.stderr ?? "error",
      );
      assert.equal(parsed, "", `${step.name}`);
    }
  });

  it("takes the version from the tag only when package.json and Chart.yaml agree with it", async () => {
    const script = steps.find((s) => s.id === "version")?.run ?? "";
    const packageVersion = (JSON.parse(readRepoFile("package.json")) as { version: string }).version;
    const chartVersion = /^version: (\S+)$/m.exec(readRepoFile("charts/authority/Chart.yaml"))?.[1];
    const output = join(dir.path, "github-output");
    const env = { GITHUB_OUTPUT: output, REGISTRY: "registry.example.com/platform" };

    const ok = await bash(script, repoPath("."), { ...env, GITHUB_REF_NAME: `v${packageVersion}` });
    assert.equal(ok.code, 0, ok.stdout);
    assert.equal(
      await readFile(output, "utf8"),
      `version=${packageVersion}\nchart-version=${chartVersion}\n`,
    );

    const other = await bash(script, repoPath("."), { ...env, GITHUB_REF_NAME: "v99.0.0" });
    assert.equal(other.code, 1);
    assert.match(other.stdout, /::error::tag v99\.0\.0: package\.json has /);
    const noRegistry = await bash(script, repoPath("."), {
      ...env,
      REGISTRY: "",
      GITHUB_REF_NAME: `v${packageVersion}`,
    });
    assert.equal(noRegistry.code, 1);
    assert.match(noRegistry.stdout, /::error::set the repository variable RELEASE_REGISTRY/);
  });

  it("lints and packages the real chart into the archive the push step names, which renders", async () => {
    projectTool("helm");
    await cp(repoPath("charts/authority"), join(dir.path, "charts/authority"), { recursive: true });
    const step = stepRunning(/helm package /);
    const packaged = await bash(step.run ?? "", dir.path, {});
    assert.equal(packaged.code, 0, packaged.stdout);
    const chartVersion = /^version: (\S+)$/m.exec(readRepoFile("charts/authority/Chart.yaml"))?.[1];
    const archive = join(dir.path, "dist", `authority-${chartVersion}.tgz`);
    const { stdout: listing } = await run("tar", ["-tzf", archive]);
    for (const file of ["Chart.yaml", "values.yaml", "values.schema.json", "files/alerts.yaml"]) {
      assert.ok(listing.split("\n").includes(`authority/${file}`), `the archive holds ${file}`);
    }
    const template = (chart: string) =>
      run(
        projectTool("helm"),
        [
          "template",
          "authority",
          chart,
          "--kube-version",
          "1.31.0",
          "-f",
          repoPath("charts/authority/ci/default-values.yaml"),
        ],
        { maxBuffer: 32 << 20, timeout: 60_000 },
        // The credentials the chart generates (kept across upgrades by lookup) differ per render.
      ).then(({ stdout }) =>
        stdout.replace(/^(\s+(?:api_key|access_key|secret_key)): "[^"]*"$/gm, '$1: "<generated>"'),
      );
    assert.equal(
      await template(archive),
      await template(repoPath("charts/authority")),
      "the archive renders as the chart",
    );
  });
});
