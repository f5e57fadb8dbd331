import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { CAPABILITY, UPSTREAM_HOST, type World } from "./world.ts";

/** The environment of a real `authority sidecar` process of `world` (test/helpers/sidecar-process.ts starts it). */
export async function sidecarProcessEnv(
  world: World,
  dir: string,
  extra: Record<string, string> = {},
): Promise<Record<string, string>> {
  const tokenFile = join(dir, "sidecar-token");
  await writeFile(tokenFile, world.tokens.sidecar, { mode: 0o600 });
  return {
    AUTHORITY_URL: world.authorityUrl,
    AUTHORITY_ISSUER: world.context.config.issuer,
    AUTHORITY_AUDIENCE: "authority",
    AUTHORITY_SIDECAR_TOKEN_FILE: tokenFile,
    AUTHORITY_SERVICE_IDENTITY: world.context.config.serviceIdentity,
    AUTHORITY_SIDECAR_CAPABILITY_MAP: JSON.stringify({ [UPSTREAM_HOST]: CAPABILITY }),
    AUTHORITY_SIDECAR_JOURNAL_DIR: join(dir, "journal"),
    ...extra,
  };
}

/** The status of `/readyz`, or undefined when nothing answers. */
export async function readyzStatus(metricsPort: number): Promise<number | undefined> {
  const response = await fetch(`http://127.0.0.1:${metricsPort}/readyz`).catch(() => undefined);
  await response?.arrayBuffer();
  return response?.status;
}

/** Builds the sidecar's start-up snapshot into `dir` (scripts/build-sidecar-snapshot.ts), as `make sidecar-snapshot` does. */
export function buildSidecarSnapshot(dir: string): void {
  const repo = fileURLToPath(new URL("../../../", import.meta.url));
  const built = spawnSync(process.execPath, ["scripts/build-sidecar-snapshot.ts", dir], {
    cwd: repo,
    encoding: "utf8",
  });
  assert.equal(built.status, 0, built.stderr);
}
