/**
 * The decision-log export of a process's settings, its modules loaded only when it is on: a
 * sidecar without `--decision-export-url` loads none of the exporter (decision 2797).
 */
import type { ConfiguredExporterDependencies, DecisionExportConfig } from "./configured.ts";
import type { DecisionExporter } from "./exporter.ts";

export async function startDecisionExport(
  config: DecisionExportConfig | undefined,
  dependencies: ConfiguredExporterDependencies,
): Promise<DecisionExporter | undefined> {
  if (config === undefined) return undefined;
  const { configuredExporter } = await import("./configured.ts");
  return configuredExporter(config, dependencies);
}
