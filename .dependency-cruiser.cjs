/**
 * The import rules of src/ (docs/decisions/1701-layers-and-import-rules.md has the layer map
 * and the reasons). `make lint` runs `depcruise src`; a violation fails the build.
 *
 * Layers, outermost first:
 *   entry points  src/servers/*, src/cli, src/dev   processes, routes, wiring
 *   application   every other folder of src/        admin, audit, bindings, catalog, clients,
 *                                                   config, crypto, execute, identity, mcp,
 *                                                   observability, pipeline (the stage order of
 *                                                   every enforcement path), policy, store
 *   core          src/core                          the pure domain (decide() and its inputs)
 * `src/errors.ts` is the one error table: data every layer reads, and it imports nothing.
 */

const ENTRY = "^src/(servers|cli|dev)/";
const CORE = "^src/core/";
const ERRORS = "^src/errors\\.ts$";

/**
 * The order among the application folders, innermost first (docs/decisions/2646, 2703): a
 * folder imports only folders of its own tier or of an inner one. `config` (the process
 * schemas) is outermost: it names every module's settings; what inner folders need of it is
 * theirs (`ConfigError` in core, the log levels and tracing shape in observability, the
 * decision-export shape in audit).
 */
const FOLDER_ORDER = [
  ["store", "catalog", "crypto", "identity"],
  ["observability"],
  ["audit", "execute"],
  ["clients"],
  ["policy"],
  ["pipeline"],
  ["admin"],
  ["bindings", "mcp"],
  ["config"],
];

/**
 * One rule per tier: none of its folders imports a folder of an outer tier, and (so that no
 * two folders can import each other) none imports another folder of its own tier
 * (docs/decisions/2901).
 */
function folderOrderRules() {
  const upward = FOLDER_ORDER.slice(0, -1).map((tier, index) => {
    const outer = FOLDER_ORDER.slice(index + 1).flat();
    return {
      name: `folder-order-${tier.join("-")}`,
      severity: "error",
      comment: `${tier.join(", ")} must not import ${outer.join(", ")} (the folder order of decision 2646): move the shared part inward.`,
      from: { path: `^src/(${tier.join("|")})/` },
      to: { path: `^src/(${outer.join("|")})/` },
    };
  });
  const sideways = FOLDER_ORDER.flatMap((tier) =>
    tier.map((folder) => ({
      name: `folder-order-${folder}-not-sideways`,
      severity: "error",
      comment: `${folder} must not import another folder of its tier (${tier.join(", ")}): move the shared part inward.`,
      from: { path: `^src/${folder}/` },
      to: { path: `^src/(${tier.filter((other) => other !== folder).join("|")})/` },
    })),
  );
  return [...upward, ...sideways.filter((rule) => !rule.to.path.endsWith("()/"))];
}

/** What core may use besides itself and the error table: pure computation, no I/O. */
const CORE_ALLOWED = [CORE, ERRORS, "^crypto$", "node_modules/(ajv|ajv-formats|json-pointer|re2js)/"];

module.exports = {
  forbidden: [
    {
      name: "no-circular",
      severity: "error",
      comment: "An import cycle: one of the modules must give the shared part to a module both can import.",
      from: { path: "^src/" },
      to: { circular: true },
    },
    {
      name: "core-is-pure",
      severity: "error",
      comment: "src/core imports only core, src/errors.ts, node:crypto and the schema/pattern/pointer libraries.",
      from: { path: CORE },
      to: { pathNot: CORE_ALLOWED },
    },
    {
      name: "errors-table-is-a-leaf",
      severity: "error",
      comment: "src/errors.ts is read by every layer, so it imports nothing of src/.",
      from: { path: ERRORS },
      to: { path: "^src/" },
    },
    {
      name: "application-not-to-entry-points",
      severity: "error",
      comment:
        "The application layer must not import a server, the CLI or the dev environment: move what both need inward.",
      from: { path: "^src/", pathNot: [ENTRY, CORE, ERRORS] },
      to: { path: ENTRY },
    },
    ...folderOrderRules(),
    {
      name: "server-not-to-other-server",
      severity: "error",
      comment:
        "One server does not import another (src/servers/http is the shared HTTP plumbing); a contract both speak lives in the application layer.",
      from: { path: "^src/servers/([^/]+)/" },
      to: { path: "^src/servers/", pathNot: ["^src/servers/$1/", "^src/servers/http/"] },
    },
    {
      name: "servers-not-to-cli-or-dev",
      severity: "error",
      comment: "Servers are built by the CLI and the dev environment, never the other way round.",
      from: { path: "^src/servers/" },
      to: { path: "^src/(cli|dev)/" },
    },
    {
      name: "dev-not-to-cli",
      severity: "error",
      comment: "The dev environment is started by the CLI; it does not import the CLI.",
      from: { path: "^src/dev/" },
      to: { path: "^src/cli/" },
    },
    {
      name: "not-to-unresolvable",
      severity: "error",
      comment: "An import that does not resolve (a typo, or a module that was moved).",
      from: { path: "^src/" },
      to: { couldNotResolve: true },
    },
    {
      name: "not-to-dev-dependencies",
      severity: "error",
      comment: "Production code imports only dependencies, not devDependencies.",
      from: { path: "^src/" },
      to: { dependencyTypes: ["npm-dev"] },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    // swc, not tsc: dependency-cruiser's tsc parser supports TypeScript < 7 only. swc reports
    // `import type` edges as well, so type-only cycles count as cycles.
    parser: "swc",
    enhancedResolveOptions: {
      extensions: [".ts", ".js", ".cjs", ".mjs", ".json"],
      conditionNames: ["import", "require", "node", "default"],
      exportsFields: ["exports"],
    },
    reporterOptions: { text: { highlightFocused: true } },
  },
};
