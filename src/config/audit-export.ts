/**
 * The configuration of `authority audit export`: the store whose decision chains and signed
 * checkpoints to write out for `authority audit verify`.
 */
import { defineProcess } from "./schema.ts";
import { embeddedStateSettings, setting } from "./settings.ts";

export interface AuditExportConfig {
  readonly storeUrl: string;
}

export const auditExportSettings = {
  // Required: exporting a default local file is never meant.
  store: setting({ ...embeddedStateSettings.store, defaultText: undefined }),
} as const;

export const auditExportSchema = defineProcess({
  command: "audit export",
  title: "Decision-chain export (`authority audit export`)",
  settings: auditExportSettings,
  notes: `Writes the decision chains (logs \`audit\`, \`mcp_audit\`, \`evidence\`) and their signed
checkpoints as JSON lines to standard output (or \`--out\`), for \`authority audit verify\`, which
needs nothing else but the service identity's public keys (docs/security.md, "Tamper-evident
decision records").`,
  build(read): AuditExportConfig {
    return { storeUrl: read.value("store") };
  },
});
