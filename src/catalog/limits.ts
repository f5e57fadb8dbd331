/**
 * Bounds on what one import may cost. A specification is submitted by a partner admin,
 * so every size that drives memory or CPU is capped before the work is done.
 */
export const importLimits = {
  /** Characters of JSON or YAML text (also applied to the JSON form of an object input). */
  maxDocumentChars: 5 * 1024 * 1024,
  /** Nesting depth of the parsed document. */
  maxDepth: 128,
  /** YAML alias nodes; a few are legitimate, many are an expansion attack. */
  maxYamlAliases: 100,
  /** HTTP operations in one document. */
  maxOperations: 2000,
  /** Nodes of one operation object with its `$ref`s inlined, checked before the parser runs. */
  maxExpandedNodesPerOperation: 200_000,
  /** Nodes of the whole document with its `$ref`s inlined, checked before the parser runs. */
  maxExpandedNodes: 2_000_000,
  /** Schema nodes of one operation after `$ref`s are inlined (input and response together). */
  maxSchemaNodesPerOperation: 20_000,
  /** Schema nodes of the whole import after `$ref`s are inlined. */
  maxSchemaNodesTotal: 1_000_000,
  /** Problems listed in one error; the rest are counted in a final entry. */
  maxProblems: 100,
  /** Warnings returned by one import; the rest are counted in a final entry. */
  maxWarnings: 200,
  /** Time given to the parser to resolve `$ref`s. */
  dereferenceTimeoutMs: 10_000,
} as const;
