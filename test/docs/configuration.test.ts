import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";
import { Command } from "commander";
import { processSchemas, renderConfigurationDoc } from "../../src/cli/configuration-doc.ts";
import { flagAttribute } from "../../src/cli/settings-options.ts";
import { allSettings } from "../../src/config/schema.ts";

const repo = new URL("../../", import.meta.url).pathname;

/** Every subcommand as main.ts registers it (all of them: no argument selects one). */
async function registeredCommands(): Promise<readonly Command[]> {
  const program = new Command("authority");
  for (const name of [
    "serve",
    "reprotect",
    "managed",
    "crypto",
    "idp",
    "sidecar",
    "inject",
    "dev",
    "demo",
    "token",
  ]) {
    const module = (await import(`../../src/cli/commands/${name}.ts`)) as { register(p: Command): void };
    module.register(program);
  }
  return program.commands;
}

/** Flags a command has that are actions of one run, not settings (nothing to configure). */
const ACTION_FLAGS: Readonly<Record<string, readonly string[]>> = {
  reprotect: ["--restart", "--from-embedded-kek-file"],
};

/**
 * AUTHORITY_* names in the docs and manifests that are shell variables of examples, not
 * settings (and AUTHORITY_PEERS_ONLY of scripts/ensure-test-peers.sh, which the guides run;
 * AUTHORITY_SIDECAR_SNAPSHOT, read by the launcher before any setting is, to pick the start-up
 * snapshot: docs/sidecar.md).
 */
const NOT_SETTINGS = new Set([
  "AUTHORITY_TOKEN",
  "AUTHORITY_BINDING_ID",
  "AUTHORITY_PEERS_ONLY",
  "AUTHORITY_SIDECAR_SNAPSHOT",
]);

async function filesUnder(dir: string, keep: (name: string) => boolean): Promise<string[]> {
  const entries = await readdir(join(repo, dir), { recursive: true, withFileTypes: true });
  return entries.filter((e) => e.isFile() && keep(e.name)).map((e) => join(e.parentPath, e.name));
}

describe("docs/configuration.md", () => {
  it("is what the settings definitions generate (run `make docs` after changing one)", async () => {
    const committed = await readFile(join(repo, "docs/configuration.md"), "utf8");
    const generated = renderConfigurationDoc();
    if (committed !== generated) {
      const a = committed.split("\n");
      const b = generated.split("\n");
      const line = a.findIndex((text, i) => text !== b[i]);
      assert.fail(
        `docs/configuration.md differs from the definitions at line ${line + 1}:\n  committed: ${a[line]}\n  generated: ${b[line]}\nrun \`make docs\``,
      );
    }
  });

  it("lists every subcommand, and every flag each one has comes from its definitions", async () => {
    const commands = await registeredCommands();
    const documented = new Set(processSchemas.map((s) => s.command));
    for (const command of commands) {
      const name = command.name();
      const schema = processSchemas.find((s) => s.command === (name === "reprotect" ? "serve" : name));
      assert.ok(schema, `authority ${name} has no settings schema`);
      assert.ok(documented.has(schema.command));
      const defined = new Set(
        allSettings(schema).flatMap((spec) =>
          spec.noFlag === true
            ? []
            : [
                spec.negatedFlag === true ? `--no-${spec.key}` : `--${spec.key}`,
                ...(spec.flagAliases ?? []).map((alias) => `--${alias}`),
              ],
        ),
      );
      const flags = command.options.map((option) => option.long ?? "");
      assert.ok(flags.includes("--config"), `authority ${name} does not take --config`);
      for (const flag of flags) {
        if (ACTION_FLAGS[name]?.includes(flag)) continue;
        assert.ok(defined.has(flag), `authority ${name} ${flag} is not defined in its settings schema`);
      }
      for (const flag of defined) assert.ok(flags.includes(flag), `authority ${name} lacks ${flag}`);
      // Commander applies no default and reads no environment: precedence lives in one place.
      for (const option of command.options) {
        assert.equal(
          option.defaultValue,
          undefined,
          `authority ${name} ${option.long} has a commander default`,
        );
        assert.equal(
          option.envVar,
          undefined,
          `authority ${name} ${option.long} reads the environment itself`,
        );
        assert.equal(flagAttribute((option.long ?? "").replace(/^--(no-)?/, "")), option.attributeName());
      }
    }
  });

  it("defines every AUTHORITY_* variable the README, docs, manifests, chart and injector patch use", async () => {
    const defined = new Set(
      processSchemas.flatMap((schema) =>
        allSettings(schema).flatMap((spec) => (spec.env === undefined ? [] : [spec.env])),
      ),
    );
    const files = [
      join(repo, "README.md"),
      join(repo, "src/servers/inject/patch.ts"),
      ...(await filesUnder("docs", (n) => n.endsWith(".md") && n !== "configuration.md")),
      ...(await filesUnder("deploy", () => true)),
      ...(await filesUnder("charts", () => true)),
    ];
    for (const file of files) {
      const text = await readFile(file, "utf8");
      for (const [name] of text.matchAll(/\bAUTHORITY_[A-Z0-9_]+\b/g)) {
        if (NOT_SETTINGS.has(name)) continue;
        assert.ok(defined.has(name), `${file.slice(repo.length)} uses ${name}, which no setting defines`);
      }
    }
  });

  it("accepts every flag the README and docs pass to an authority subcommand", async () => {
    const commands = await registeredCommands();
    const files = [join(repo, "README.md"), ...(await filesUnder("docs", (n) => n.endsWith(".md")))];
    let seen = 0;
    for (const file of files) {
      const text = await readFile(file, "utf8");
      for (const match of text.matchAll(/\bauthority ([a-z]+)\b([^`|\n]*(?:\\\n[^`|\n]*)*)/g)) {
        const command = commands.find((c) => c.name() === match[1]);
        if (command === undefined) continue;
        const flags = command.options.map((option) => option.long);
        for (const [flag] of (match[2] ?? "").matchAll(/(?<=\s)--[a-z][a-z0-9-]*/g)) {
          seen += 1;
          assert.ok(flags.includes(flag), `${file.slice(repo.length)}: authority ${match[1]} has no ${flag}`);
        }
      }
    }
    assert.ok(seen >= 5, `only ${seen} documented flags found: the scan is broken`);
  });
});
