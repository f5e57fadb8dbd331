import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import fc from "fast-check";
import { processSchemas } from "../../src/cli/configuration-doc.ts";
import { allSettings, defineProcess, resolveProcessConfig } from "../../src/config/schema.ts";
import {
  boolean,
  duration,
  existingFile,
  httpUrl,
  integer,
  listenAddress,
  oneOf,
  positiveInteger,
  resolveSetting,
  type SettingSpec,
  setting,
  text,
  validator,
} from "../../src/config/settings.ts";
import { ConfigError } from "../../src/core/config-error.ts";

/** A schema of one integer setting with a default, to observe precedence. */
const probe = defineProcess({
  command: "probe",
  title: "probe",
  settings: {
    size: setting({
      key: "size",
      env: "PROBE_SIZE",
      description: "a size",
      default: 7,
      parse: positiveInteger(1000),
    }),
  },
  build: (read) => ({ size: read.value("size"), sources: read.sources() }),
});

describe("one configuration mechanism", () => {
  it("takes flags over the environment over the config file over the default", () => {
    const present = fc.option(fc.integer({ min: 1, max: 1000 }), { nil: undefined });
    fc.assert(
      fc.property(present, present, present, (flag, env, file) => {
        const config = resolveProcessConfig(probe, {
          flags: flag === undefined ? {} : { size: String(flag) },
          env: env === undefined ? {} : { PROBE_SIZE: String(env) },
          file: file === undefined ? {} : { size: file },
        });
        const expected = flag ?? env ?? file ?? 7;
        const source =
          flag !== undefined ? "flag" : env !== undefined ? "env" : file !== undefined ? "file" : "default";
        assert.equal(config.size, expected);
        assert.equal(config.sources.size, source);
      }),
    );
  });

  it("validates a value even when a higher source would win only if it is valid: the winner is validated", () => {
    assert.throws(
      () => resolveProcessConfig(probe, { flags: { size: "0" }, env: { PROBE_SIZE: "5" } }),
      /^ConfigError: --size must be an integer from 1 to 1000$/,
    );
    assert.throws(
      () => resolveProcessConfig(probe, { file: { size: 5000 }, fileName: "p.yaml" }),
      /size in p\.yaml must be an integer/,
    );
    assert.throws(
      () => resolveProcessConfig(probe, { file: { sise: 5 }, fileName: "p.yaml" }),
      /p\.yaml has unknown settings: sise/,
    );
  });

  it("never echoes a secret's value, even from a validator that would", () => {
    const echoing = setting({
      key: "token",
      env: "PROBE_TOKEN",
      description: "a secret",
      secret: true,
      parse: validator("token", (raw, where) => {
        throw new ConfigError(`${where} is bad: ${String(raw)}`);
      }),
    });
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 200 }).filter((s) => s.trim().length > 0),
        (secret) => {
          for (const inputs of [
            { flags: { token: secret } },
            { env: { PROBE_TOKEN: secret } },
            { file: { token: secret } },
          ]) {
            try {
              resolveSetting(echoing, inputs);
              assert.fail("accepted");
            } catch (error) {
              assert.ok(error instanceof ConfigError);
              assert.match(
                error.message,
                /^(--token|PROBE_TOKEN|token in the config file) is not valid \(token; the value is secret and not shown\)$/,
              );
            }
          }
        },
      ),
    );
  });

  it("no secret setting of any process echoes its value when refused", () => {
    const secrets = processSchemas.flatMap((schema) =>
      allSettings(schema).filter((spec) => spec.secret === true && spec.env !== undefined),
    );
    assert.ok(secrets.length >= 6);
    fc.assert(
      fc.property(
        fc.stringMatching(/^[A-Za-z0-9+/=:@._-]{6,40}$/),
        fc.constantFrom(...secrets),
        (value, spec: SettingSpec<unknown>) => {
          const hostile = `ftp://${value}\u0000`;
          try {
            resolveSetting(spec, { env: { [spec.env as string]: hostile } });
          } catch (error) {
            assert.ok(error instanceof ConfigError);
            assert.ok(!error.message.includes(value), `${spec.key} echoed its value: ${error.message}`);
          }
        },
      ),
    );
  });

  it("every setting's default is valid, and keys and variables are unique within a process", () => {
    for (const schema of processSchemas) {
      const keys = new Set<string>();
      const envs = new Set<string>();
      for (const spec of allSettings(schema)) {
        assert.ok(!keys.has(spec.key), `${schema.command}: ${spec.key} twice`);
        keys.add(spec.key);
        if (spec.env !== undefined) {
          assert.ok(!envs.has(spec.env), `${schema.command}: ${spec.env} twice`);
          envs.add(spec.env);
        }
        assert.ok(spec.description.length > 0);
        if (spec.default !== undefined) assert.notEqual(resolveSetting(spec, {}).value, undefined);
        assert.ok(
          !(spec.default !== undefined && spec.defaultText !== undefined),
          `${spec.key}: two defaults`,
        );
      }
    }
  });
});

describe("shared validators", () => {
  let dir = "";
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "authority-validators-"));
    await writeFile(join(dir, "cert.pem"), "x");
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("duration: a whole number in the setting's unit, or a number with a unit", () => {
    const ms = duration("ms", 1, 3_600_000);
    const s = duration("s", 0, 86_400);
    assert.equal(ms("250", "--t"), 250);
    assert.equal(ms("2s", "--t"), 2000);
    assert.equal(ms("1m", "--t"), 60_000);
    assert.equal(ms(1500, "t in f.yaml"), 1500);
    assert.equal(s("15m", "--t"), 900);
    assert.equal(s("0", "--t"), 0);
    for (const bad of ["", "1.5", "-1", "10x", "1500ms", "25h", " ", "1e3", "0x10"]) {
      assert.throws(() => s(bad, "--t"), /^ConfigError: --t must be a duration from 0 to 86400 s/);
    }
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 3600 }), (n) => {
        assert.equal(ms(`${n}s`, "--t"), n * 1000);
        assert.equal(ms(String(n * 1000), "--t"), n * 1000);
      }),
    );
    fc.assert(
      fc.property(fc.string(), (raw) => {
        try {
          const value = ms(raw, "--t");
          assert.ok(Number.isSafeInteger(value) && value >= 1 && value <= 3_600_000);
        } catch (error) {
          assert.ok(error instanceof ConfigError);
        }
      }),
    );
  });

  it("integers, booleans, enums, URLs and listen addresses name the setting", () => {
    assert.equal(positiveInteger(10)("10", "--n"), 10);
    assert.throws(() => positiveInteger(10)("0", "--n"), /--n must be an integer from 1 to 10/);
    assert.throws(() => integer(0, 5)("1e3", "--n"), /--n must be an integer/);
    assert.equal(boolean("yes", "--b"), true);
    assert.equal(boolean(false, "b in f.yaml"), false);
    assert.throws(() => boolean("maybe", "--b"), /--b must be true or false/);
    assert.equal(oneOf(["a", "b"] as const)("b", "--e"), "b");
    assert.throws(() => oneOf(["a", "b"] as const)("c", "--e"), /--e must be one of a, b/);
    assert.equal(httpUrl("https://x.example/", "--u"), "https://x.example");
    assert.throws(() => httpUrl("file:///etc/passwd", "--u"), /--u must be an absolute http\(s\) URL/);
    assert.deepEqual(listenAddress("[::1]:80", "--l"), { host: "::1", port: 80 });
    assert.throws(() => listenAddress(8080, "l in f.yaml"), /l in f\.yaml must be a string/);
    assert.throws(() => text()("  ", "--x"), /--x must not be empty/);
  });

  it("an existing file: missing, or a directory, is refused with the setting's name", () => {
    assert.equal(existingFile(join(dir, "cert.pem"), "--tls-cert"), join(dir, "cert.pem"));
    assert.throws(
      () => existingFile(join(dir, "nope.pem"), "--tls-cert"),
      /^ConfigError: --tls-cert: .*nope\.pem does not exist/,
    );
    assert.throws(
      () => existingFile(dir, "AUTHORITY_TLS_CERT_FILE"),
      /AUTHORITY_TLS_CERT_FILE: .* is not a file/,
    );
  });
});
