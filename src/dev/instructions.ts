/**
 * What `authority dev` prints once everything is up: the URLs, where the credentials are,
 * and commands that work as printed (curl + jq against the running services). Pure.
 */
import { relative } from "node:path";
import type { DevUrls } from "./credentials-file.ts";
import { DEV_CAPABILITY, DEV_IDP, DEV_SUBJECTS } from "./names.ts";
import type { SeedReport } from "./seed.ts";

export interface InstructionsInput {
  readonly urls: DevUrls;
  readonly stateDir: string;
  readonly credentialsFile: string;
  readonly managedCertFile: string;
  readonly report: SeedReport;
  readonly warnings: readonly string[];
  /** Relative paths are printed relative to this directory (default process.cwd()). */
  readonly cwd?: string;
}

/** A path as the user would type it from `cwd` (relative when inside it). */
function shown(path: string, cwd: string): string {
  const rel = relative(cwd, path);
  return rel !== "" && !rel.startsWith("..") && !rel.startsWith("/") ? rel : path;
}

export function devInstructions(input: InstructionsInput): string[] {
  const cwd = input.cwd ?? process.cwd();
  const { urls } = input;
  const creds = shown(input.credentialsFile, cwd);
  const cert = shown(input.managedCertFile, cwd);
  const created = input.report.created.length;
  const updated = input.report.updated.length;
  const lines = [
    "",
    "authority dev is running (Ctrl-C stops it).",
    "",
    `  authority service    ${urls.authority}        (admin API, /v1/authorize-invocation, /v1/bindings/…, /mcp)`,
    `  managed crypto API   ${urls.managed}       (HTTPS, self-signed: --cacert ${cert})`,
    `  crypto service       ${urls.crypto}`,
    `  identity provider    ${urls.idp}        (token endpoint ${urls.tokenEndpoint})`,
    `  sample customers API ${urls.sampleApi}       (the upstream of the "${DEV_CAPABILITY.capabilityId}" capability)`,
  ];
  if (urls.sidecar !== undefined) {
    lines.push(
      `  sidecar              ext_authz grpc ${urls.sidecar.grpc}, forward proxy ${urls.sidecar.proxy}, metrics ${urls.sidecar.metrics}/metrics`,
    );
  }
  lines.push(
    "",
    `  state        ${shown(input.stateDir, cwd)}  (seeded: ${created} created, ${updated} updated, ${input.report.unchanged.length} reused)`,
    `  credentials  ${creds}  (mode 0600: admin, service account, partner keys, agents, workload client)`,
  );
  for (const warning of input.warnings) lines.push(`  warning: ${warning}`);
  const agent = DEV_SUBJECTS.agent.subjectId;
  lines.push(
    "",
    "Tokens (in another terminal, from this directory):",
    `  CREDS=${creds}`,
    `  ADMIN=$(curl -s ${urls.tokenEndpoint} -d grant_type=password -d username=${DEV_IDP.adminUsername} \\`,
    `    --data-urlencode "password=$(jq -r .admin.password $CREDS)" | jq -r .access_token)`,
    `  AGENT=$(curl -s ${urls.tokenEndpoint} -d grant_type=client_credentials \\`,
    `    -u "${agent}:$(jq -r .subjects.agent.client_secret $CREDS)" | jq -r .access_token)`,
    "  (or: authority token --client-id agent-demo --client-secret …)",
    "",
    "Try:",
    `  curl -s -w '\\n' ${urls.authority}/partners -H "Authorization: Bearer $ADMIN"`,
    `  curl -s -w '\\n' ${urls.authority}/v1/authorize-invocation -H "Authorization: Bearer $AGENT" -H 'Content-Type: application/json' \\`,
    `    -d '{"capability_id":"${DEV_CAPABILITY.capabilityId}","method":"GET","path":"/customers/cus_00000001"}'`,
    `  curl -s -w '\\n' ${urls.authority}/v1/authorize-invocation -H "Authorization: Bearer $AGENT" -H 'Content-Type: application/json' \\`,
    `    -d '{"capability_id":"${DEV_CAPABILITY.capabilityId}","method":"DELETE","path":"/customers/cus_00000001"}'`,
    `  curl -s -w '\\n' --cacert ${cert} ${urls.managed}/v1/encrypt -H 'Content-Type: application/json' \\`,
    `    -H "username: $(jq -r .service_account.username $CREDS)" -H "password: $(jq -r .service_account.password $CREDS)" \\`,
    `    -H "api_key: $(jq -r .partner.api_key $CREDS)" -H "access_key: $(jq -r .partner.access_key $CREDS)" \\`,
    `    -H "secret_key: $(jq -r .partner.secret_key $CREDS)" -d '{"data":"hello"}'`,
    "",
    "Your own API on this machine: restart as AUTHORITY_EGRESS_ALLOW=127.0.0.1:<its port> make dev (docs/protect-your-api.md).",
    "More in docs/quickstart.md.",
  );
  return lines;
}
