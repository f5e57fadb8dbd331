import { CoreError } from "./core-error.ts";
import { type OperationSnapshot, operationSnapshotProblems } from "./operation-snapshot.ts";
import { createPathMatcher, type PathMatcher, PathTemplateError } from "./path-template.ts";
import { buildPermissionId, type PermissionId } from "./permission-id.ts";
import { compileSchema } from "./schema-validator.ts";
import { capabilitySchema } from "./schemas/capability.schema.ts";

export { capabilitySchema };

/** A partner-scoped API catalog: the operations a capability may ever expose. */
export interface Capability {
  readonly capability_id: string;
  readonly partner_id: string;
  readonly name: string;
  readonly catalog_version: string;
  readonly operations: readonly OperationSnapshot[];
}

export class CapabilityError extends CoreError<"capability_invalid"> {
  readonly messages: readonly string[];

  constructor(messages: readonly string[]) {
    super("capability_invalid", `capability is invalid: ${messages.join("; ")}`);
    this.messages = messages;
  }
}

/** The permission id of every catalog operation, in catalog order, without repeats. */
export function catalogPermissionIds(capability: Capability): PermissionId[] {
  const ids = capability.operations.map((op) =>
    buildPermissionId(capability.capability_id, op.method, op.path),
  );
  return [...new Set(ids)];
}

const operationIds = new WeakMap<Capability, readonly (PermissionId | undefined)[]>();

/**
 * The permission id of the catalog operation at `index`, built once per capability object
 * (like its matcher); undefined when the operation cannot have one.
 */
export function operationPermissionId(capability: Capability, index: number): PermissionId | undefined {
  let ids = operationIds.get(capability);
  if (ids === undefined) {
    ids = capability.operations.map((op) => {
      try {
        return buildPermissionId(capability.capability_id, op.method, op.path);
      } catch {
        return undefined;
      }
    });
    operationIds.set(capability, ids);
  }
  return ids[index];
}

const matchers = new WeakMap<Capability, PathMatcher>();

/**
 * The method + path matcher of a catalog, built once per capability object (capabilities
 * are immutable, so the cache cannot go stale). Throws PathTemplateError when two
 * operations overlap.
 */
export function catalogMatcher(capability: Capability): PathMatcher {
  let matcher = matchers.get(capability);
  if (matcher === undefined) {
    matcher = createPathMatcher(
      capability.operations.map((op) => ({ template: op.path, method: op.method })),
    );
    matchers.set(capability, matcher);
  }
  return matcher;
}

const checkCapability = compileSchema<Capability>(capabilitySchema);

/**
 * Validates a catalog: schema, every path a valid template, no two operations with the
 * same method and path shape. Throws CapabilityError with safe messages.
 */
export function validateCapability(value: unknown): Capability {
  const result = checkCapability(value);
  if (!result.ok) throw new CapabilityError(result.messages);
  const capability = result.value;
  const problems = capability.operations.flatMap((op, i) =>
    operationSnapshotProblems(op, `/operations/${i}`),
  );
  if (problems.length > 0) throw new CapabilityError(problems);
  try {
    createPathMatcher(capability.operations.map((op) => ({ template: op.path, method: op.method })));
  } catch (error) {
    if (error instanceof PathTemplateError) throw new CapabilityError([error.message]);
    throw error;
  }
  const ids = capability.operations.map((op) =>
    buildPermissionId(capability.capability_id, op.method, op.path),
  );
  if (new Set(ids).size !== ids.length) throw new CapabilityError(["/operations repeats an operation"]);
  return capability;
}
