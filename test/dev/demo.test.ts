import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../../", import.meta.url));

/** Runs `node bin/authority.ts demo` as a user would; kills it if it outlives the deadline. */
function runDemo(deadlineMs: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["bin/authority.ts", "demo", "--no-color"], {
      cwd: root,
      env: { ...process.env, AUTHORITY_LOG_LEVEL: "error" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString("utf8");
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString("utf8");
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), deadlineMs);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

test("authority demo walks through every path and exits 0 when every outcome is the expected one", {
  timeout: 200_000,
}, async () => {
  const { code, stdout, stderr } = await runDemo(180_000);
  assert.equal(code, 0, `demo exited ${code}\n${stdout}\n${stderr.slice(-4000)}`);
  assert.match(stdout, /All outcomes as expected: \d+ passed, 0 failed/);
  for (const reason of [
    "missing_subject",
    "missing_capability",
    "unknown_capability",
    "missing_policy",
    "policy_verification_failed",
    "subject_mismatch",
    "policy_revoked",
    "policy_expired",
    "unknown_operation",
    "operation_not_allowed",
  ]) {
    assert.ok(stdout.includes(`denied ${reason}`), `the demo shows a ${reason} deny`);
  }
  // The binding step walks the experience lifecycle: create, narrow, disable, remove.
  for (const step of [
    "PUT …/experience (only Saved cards)",
    "alice  GET /customers/cus_00000002 (policy allows, experience hides)",
    "PATCH …/experience enabled=false",
    "DELETE …/experience",
  ]) {
    assert.ok(stdout.includes(`✓ ${step}`), `the demo shows "${step}" as expected`);
  }
  // A downstream MCP server governed through /mcp: listed by policy, one call allowed, one refused.
  for (const step of [
    "tools/list as agent-demo (2026-07-28)",
    'tools/call search_tickets {team: "support"}',
    'tools/call search_tickets {team: "finance"}',
  ]) {
    assert.ok(stdout.includes(`✓ ${step}`), `the demo shows "${step}" as expected`);
  }
  // Changing policy safely and trusting the record (issue 34), after everything above.
  const safety = stdout.indexOf("Changing policy safely, trusting the record");
  assert.ok(safety > stdout.indexOf("Acting for the user"), "the policy-safety section comes last");
  const story = stdout.slice(safety);
  for (const shown of [
    /✓ its record \(GET \/admin\/audit\/receipts\/\{receipt\}\): shadow +→ shadow denied operation_not_allowed, agrees=false/,
    /authority_shadow_decisions_total\{[^}]*agreement="disagree"[^}]*\} [1-9]/,
    /✓ agent-shadow +DELETE \/customers\/cus_00000001 +→ denied operation_not_allowed, rule decide\/allowlist, remedy request_permission/,
    /✓ POST \/partners\/acme\/explain .*→ explain trace: denied at decision, operation_not_allowed/,
    /^ +decision +denied \(operation_not_allowed\)$/m,
    /✓ PUT …\/policies\/customers\?dry_run=true .*→ replay report: allow_to_deny 1, deny_to_allow 0/,
    /flip: GET \/customers\/cus_00000001 allowed → denied operation_not_allowed/,
    /✓ authority audit export, then audit verify --require-sealed +→ verified \(exit 0\)/,
    /verified: \d+ records in \d+ chains, [1-9]\d* checkpoints, .* 0 unsealed/,
    /✓ audit verify of a copy with that allow turned into a deny +→ FAILED \(modified\) at line \d+, exit 1/,
    /dec_[0-9a-f-]+ is line (\d+); FAILED \(modified\) at line \1: record n=\d+ of audit\/\S+ \(line \1\) was modified/,
  ]) {
    assert.match(story, shown);
  }
  assert.doesNotMatch(stdout, /skipped: /);
  // Expected client errors (the wrong-password step among them) are not server errors: at log
  // level "error" nothing is logged, and no stack trace is printed.
  assert.doesNotMatch(`${stdout}\n${stderr}`, /"level":(50|60)/);
  assert.doesNotMatch(`${stdout}\n${stderr}`, /^\s+at .+:\d+:\d+\)?$/m);
  // The story never prints a secret: no partner key, client secret or bearer token shapes.
  assert.doesNotMatch(stdout, /\b(apk|sk|cs|pw)_[A-Za-z0-9_-]{20,}/);
  assert.doesNotMatch(stdout, /eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}/);
});
