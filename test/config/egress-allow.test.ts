import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { authoritySchema } from "../../src/config/authority.ts";
import { devSchema } from "../../src/config/dev.ts";
import { type ProcessInputs, resolveProcessConfig } from "../../src/config/schema.ts";
import { ConfigError } from "../../src/core/config-error.ts";
import type { EgressAllowEntry } from "../../src/core/egress-address.ts";
import { sidecarSchema } from "../../src/servers/sidecar/config.ts";

/**
 * The egress allow list is the operator's, and it reaches every process that calls upstreams
 * or starts one that does (serve, sidecar, dev) through every source of the one settings
 * mechanism: a flag, AUTHORITY_EGRESS_ALLOW, and the `egress-allow` key of a config file (one
 * comma-separated string or a list). Before: `authority dev` had no such setting (a config
 * file's key was "unknown", the environment variable was ignored) and a list in a file was
 * refused everywhere.
 */

const ENTRIES = ["127.0.0.1:19090", "10.96.0.0/12", "[::1]:9000", "orders.shop.svc.cluster.local:8080"];

interface Process {
  readonly name: string;
  resolve(inputs: ProcessInputs): readonly EgressAllowEntry[];
}

const processes: readonly Process[] = [
  {
    name: "serve",
    resolve: (inputs) =>
      resolveProcessConfig(authoritySchema, {
        ...inputs,
        env: { AUTHORITY_POLICY_PROTECTION: "embedded", ...inputs.env },
      }).egress.allow,
  },
  {
    name: "sidecar",
    resolve: (inputs) =>
      resolveProcessConfig(sidecarSchema, {
        ...inputs,
        env: { AUTHORITY_SIDECAR_TOKEN_FILE: "/var/run/secrets/authority/token", ...inputs.env },
      }).egressAllow,
  },
  { name: "dev", resolve: (inputs) => resolveProcessConfig(devSchema, inputs).egressAllow },
];

const sources: Readonly<Record<string, ProcessInputs>> = {
  flag: { flags: { "egress-allow": ENTRIES.join(",") } },
  environment: { env: { AUTHORITY_EGRESS_ALLOW: ENTRIES.join(", ") } },
  "config file (string)": { file: { "egress-allow": ENTRIES.join(",") }, fileName: "authority.yaml" },
  "config file (list)": { file: { "egress-allow": ENTRIES }, fileName: "authority.yaml" },
};

describe("egress-allow: one setting, every source, every process that egresses", () => {
  for (const process of processes) {
    for (const [source, inputs] of Object.entries(sources)) {
      test(`${process.name}: from the ${source}`, () => {
        assert.deepEqual(
          process.resolve(inputs).map((entry) => entry.text),
          ENTRIES,
        );
      });
    }

    test(`${process.name}: nothing beyond public addresses by default`, () => {
      assert.deepEqual(process.resolve({}), []);
    });

    test(`${process.name}: a bad entry in a file's list is refused, naming the key and its index`, () => {
      for (const bad of [["*.shop.svc"], ["10.0.0.1/8"], [42], "metadata.google.internal"]) {
        assert.throws(
          () => process.resolve({ file: { "egress-allow": bad }, fileName: "authority.yaml" }),
          (error) =>
            error instanceof ConfigError && error.message.startsWith("egress-allow in authority.yaml"),
          JSON.stringify(bad),
        );
      }
    });
  }

  test("the flag wins over the environment, the environment over the file", () => {
    const dev = processes[2] as Process;
    const texts = (inputs: ProcessInputs) => dev.resolve(inputs).map((entry) => entry.text);
    assert.deepEqual(
      texts({
        flags: { "egress-allow": "10.0.0.1" },
        env: { AUTHORITY_EGRESS_ALLOW: "10.0.0.2" },
        file: { "egress-allow": ["10.0.0.3"] },
      }),
      ["10.0.0.1"],
    );
    assert.deepEqual(
      texts({ env: { AUTHORITY_EGRESS_ALLOW: "10.0.0.2" }, file: { "egress-allow": ["10.0.0.3"] } }),
      ["10.0.0.2"],
    );
  });
});
