import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { parseConfigText, readConfigFile } from "../../src/config/file.ts";
import { ConfigError } from "../../src/core/config-error.ts";

const MIB = 1024 * 1024;

describe("readConfigFile: the 1 MiB cap", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "config-file-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("refuses a file of 1 MiB + 1 byte and reads one of exactly 1 MiB", async () => {
    const over = join(dir, "over.yaml");
    await writeFile(over, `a: ${"x".repeat(MIB + 1 - 3)}`);
    await assert.rejects(readConfigFile(over), (error: unknown) => {
      assert.ok(error instanceof ConfigError);
      assert.match(error.message, /larger than 1 MiB/);
      return true;
    });
    const exact = join(dir, "exact.yaml");
    await writeFile(exact, `a: ${"x".repeat(MIB - 3)}`);
    const parsed = await readConfigFile(exact);
    assert.equal((parsed.a as string).length, MIB - 3);
  });

  // Attack: `--config` naming a stream that never ends (a FIFO, /dev/zero, /dev/stdin of a
  // pipe). The cap was checked after reading to the end: the process hung, or buffered up
  // to 2 GiB, before saying the file is too large. It must stop reading past the cap.
  it("stops reading a never-ending stream past the cap instead of buffering it to its end", async () => {
    const fifo = join(dir, "endless.yaml");
    execFileSync("mkfifo", [fifo]);
    const writer = createWriteStream(fifo);
    writer.on("error", () => undefined);
    // More than the cap, and the writer stays open: no end of file ever comes.
    writer.write(Buffer.alloc(MIB + 4096, "#"));
    try {
      let timer: NodeJS.Timeout | undefined;
      const outcome = await Promise.race([
        readConfigFile(fifo).then(
          () => "parsed",
          (error: unknown) =>
            error instanceof ConfigError && /larger than 1 MiB/.test(error.message)
              ? "capped"
              : String(error),
        ),
        new Promise<string>((resolve) => {
          timer = setTimeout(() => resolve("still reading after 20 s"), 20_000);
        }),
      ]);
      clearTimeout(timer);
      assert.equal(outcome, "capped");
    } finally {
      writer.destroy();
    }
  });
});

/** Runs `act` and returns what it made Node warn or write to stderr meanwhile (emitted on later ticks too). */
async function outputOf(act: () => unknown): Promise<string> {
  const seen: string[] = [];
  const onWarning = (warning: Error) => seen.push(`${warning.name}: ${warning.message}`);
  const write = process.stderr.write;
  process.on("warning", onWarning);
  process.stderr.write = ((chunk: string | Uint8Array) => {
    seen.push(String(chunk));
    return true;
  }) as typeof process.stderr.write;
  try {
    try {
      act();
    } catch (error) {
      seen.push(`thrown: ${error instanceof Error ? error.message : String(error)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  } finally {
    process.stderr.write = write;
    process.off("warning", onWarning);
  }
  return seen.join("\n");
}

describe("parseConfigText: a secret in the file is never echoed", () => {
  const secret = "hunter2-Very-Secret-Password";
  // Attack: a tag the reader does not know (`!secret`, `!vault`, as other tools' files use):
  // the YAML library warned on stderr with the source line, printing the store password.
  for (const tag of ["!secret", "!vault", "!!js/function", "!<tag:example.com,2000:x>"]) {
    it(`a value tagged ${tag} is refused with its position only`, async () => {
      const text = `listen: 127.0.0.1:8080\nstore: ${tag} redis://:${secret}@redis:6379/0\n`;
      const output = await outputOf(() => parseConfigText(text, "authority.yaml"));
      assert.ok(!output.includes(secret), `echoed the secret: ${output}`);
      assert.throws(
        () => parseConfigText(text, "authority.yaml"),
        (error: unknown) =>
          error instanceof ConfigError && /^authority\.yaml:2:8 is not valid YAML$/.test(error.message),
      );
    });
  }

  it("a key that is a collection is not echoed on stderr", async () => {
    const text = `? [${secret}, x]\n: 1\n`;
    const output = await outputOf(() => parseConfigText(text, "authority.yaml"));
    assert.ok(!output.includes(secret), `echoed the key: ${output}`);
  });

  it("plain YAML and JSON still parse", () => {
    assert.deepEqual(parseConfigText("listen: 127.0.0.1:1\nlog-level: debug\n", "a.yaml"), {
      listen: "127.0.0.1:1",
      "log-level": "debug",
    });
    assert.deepEqual(parseConfigText('{"listen": "127.0.0.1:1"}', "a.json"), { listen: "127.0.0.1:1" });
    assert.throws(() => parseConfigText("a: &x 1\nb: *x\n", "a.yaml"), ConfigError);
  });
});
