/**
 * The binding experience: the end-user-facing configuration a partner gives one binding
 * (`/v1/bindings/{id}/experience`, docs/bindings.md "Experience"): which capabilities and
 * tools its users see, the partner's names and descriptions of them, consent text with a
 * version, and an enabled switch. It only ever narrows what a user's policy allows
 * (docs/decisions/1001-binding-experience.md): `experienceDenial` and `experiencePermits`
 * are the checks binding invoke and broker execute run.
 */
import { recordBindingChange } from "../admin/audit.ts";
import type { Actor, AdminDeps } from "../admin/deps.ts";
import { parsePermissionId } from "../core/index.ts";
import { AuthorityError, type DenyReason } from "../errors.ts";
import {
  type BindingRecord,
  bindingCollections,
  bindingKeys,
  type ExperienceCapability,
  type ExperienceRecord,
  type ExperienceTool,
} from "../store/binding-model.ts";
import type { BindingChangeAuditRecord } from "../store/model.ts";

export interface ExperienceToolInput {
  readonly permission_id: string;
  readonly display_name?: string | null;
  readonly description?: string | null;
}

export interface ExperienceCapabilityInput {
  readonly capability_id: string;
  /** Absent or null: every tool of the capability the user's policy allows. */
  readonly tools?: readonly ExperienceToolInput[] | null;
}

export interface ExperienceInput {
  /** Default true. */
  readonly enabled?: boolean;
  readonly display_name?: string | null;
  readonly capabilities: readonly ExperienceCapabilityInput[];
  readonly consent?: { readonly text: string; readonly version: string } | null;
}

export type ExperienceUpdate = Partial<ExperienceInput>;

export interface ExperienceWrite {
  readonly experience: ExperienceRecord;
  readonly created: boolean;
}

function invalid(message: string, field: string): AuthorityError {
  return new AuthorityError("invalid_request", message, { details: { field } });
}

function checkCapabilities(input: readonly ExperienceCapabilityInput[]): ExperienceCapability[] {
  const seenCapabilities = new Set<string>();
  return input.map((capability, i) => {
    if (seenCapabilities.has(capability.capability_id)) {
      throw invalid("A capability may be listed once.", `/capabilities/${i}/capability_id`);
    }
    seenCapabilities.add(capability.capability_id);
    if (capability.tools === undefined || capability.tools === null) {
      return { capability_id: capability.capability_id, tools: null };
    }
    const seenTools = new Set<string>();
    const tools = capability.tools.map((tool, j): ExperienceTool => {
      const field = `/capabilities/${i}/tools/${j}/permission_id`;
      let owner: string;
      try {
        owner = parsePermissionId(tool.permission_id).capabilityId;
      } catch {
        throw invalid("Not a valid permission id.", field);
      }
      if (owner !== capability.capability_id)
        throw invalid("The permission id names another capability.", field);
      if (seenTools.has(tool.permission_id)) throw invalid("A tool may be listed once.", field);
      seenTools.add(tool.permission_id);
      return {
        permission_id: tool.permission_id,
        display_name: tool.display_name ?? null,
        description: tool.description ?? null,
      };
    });
    return { capability_id: capability.capability_id, tools };
  });
}

async function audit(
  deps: AdminDeps,
  actor: Actor,
  action: BindingChangeAuditRecord["action"],
  experience: ExperienceRecord,
): Promise<void> {
  await recordBindingChange(deps, {
    action,
    actor: actor.subject,
    partner_id: experience.partner_id,
    binding_id: experience.binding_id,
    revision: experience.revision,
    enabled: experience.enabled,
    time: experience.updated_at,
    requestId: actor.requestId,
  });
}

/** The binding's experience, or undefined when it has none (policy alone decides). */
export async function findExperience(
  deps: Pick<AdminDeps, "store">,
  binding: Pick<BindingRecord, "binding_id" | "partner_id">,
): Promise<ExperienceRecord | undefined> {
  const found = await deps.store.get<ExperienceRecord>(
    bindingCollections.experiences,
    bindingKeys.experience(binding.binding_id),
  );
  // A record of another partner (never written so) is not this binding's.
  return found !== undefined && found.partner_id === binding.partner_id ? found : undefined;
}

export async function getExperience(
  deps: Pick<AdminDeps, "store">,
  binding: BindingRecord,
): Promise<ExperienceRecord> {
  const found = await findExperience(deps, binding);
  if (found === undefined) throw new AuthorityError("not_found", "This binding has no experience.");
  return found;
}

/** Creates or replaces the binding's experience (PUT). */
export async function putExperience(
  deps: AdminDeps,
  actor: Actor,
  binding: BindingRecord,
  input: ExperienceInput,
): Promise<ExperienceWrite> {
  const previous = await findExperience(deps, binding);
  const now = deps.now().toISOString();
  const experience: ExperienceRecord = {
    binding_id: binding.binding_id,
    partner_id: binding.partner_id,
    enabled: input.enabled ?? true,
    display_name: input.display_name ?? null,
    capabilities: checkCapabilities(input.capabilities),
    consent: input.consent ?? null,
    revision: (previous?.revision ?? 0) + 1,
    created_at: previous?.created_at ?? now,
    updated_at: now,
  };
  await deps.store.put(
    bindingCollections.experiences,
    bindingKeys.experience(binding.binding_id),
    experience,
  );
  await audit(deps, actor, "experience_put", experience);
  return { experience, created: previous === undefined };
}

/** Changes some fields of the binding's experience (PATCH); `enabled: false` disables it. */
export async function updateExperience(
  deps: AdminDeps,
  actor: Actor,
  binding: BindingRecord,
  input: ExperienceUpdate,
): Promise<ExperienceRecord> {
  const previous = await getExperience(deps, binding);
  const experience: ExperienceRecord = {
    ...previous,
    ...(input.enabled === undefined ? {} : { enabled: input.enabled }),
    ...(input.display_name === undefined ? {} : { display_name: input.display_name }),
    ...(input.capabilities === undefined ? {} : { capabilities: checkCapabilities(input.capabilities) }),
    ...(input.consent === undefined ? {} : { consent: input.consent }),
    revision: previous.revision + 1,
    updated_at: deps.now().toISOString(),
  };
  await deps.store.put(
    bindingCollections.experiences,
    bindingKeys.experience(binding.binding_id),
    experience,
  );
  await audit(deps, actor, "experience_update", experience);
  return experience;
}

/** Removes the binding's experience (DELETE): the policy alone decides again. */
export async function deleteExperience(
  deps: AdminDeps,
  actor: Actor,
  binding: BindingRecord,
): Promise<ExperienceRecord> {
  const previous = await getExperience(deps, binding);
  await deps.store.delete(bindingCollections.experiences, bindingKeys.experience(binding.binding_id));
  await audit(deps, actor, "experience_delete", { ...previous, updated_at: deps.now().toISOString() });
  return previous;
}

/**
 * Checked before the policy is opened: a disabled experience refuses everything, an enabled
 * one every capability it does not list. Undefined: the experience does not refuse.
 */
export function experienceDenial(
  experience: ExperienceRecord | undefined,
  capabilityId: string,
): DenyReason | undefined {
  if (experience === undefined) return undefined;
  if (!experience.enabled) return "operation_not_allowed";
  return experience.capabilities.some((entry) => entry.capability_id === capabilityId)
    ? undefined
    : "operation_not_allowed";
}

/** The permission filter an experience adds to the decision. */
export function experiencePermits(experience: ExperienceRecord): (permissionId: string) => boolean {
  return (permissionId) => {
    if (!experience.enabled) return false;
    let capabilityId: string;
    try {
      capabilityId = parsePermissionId(permissionId).capabilityId;
    } catch {
      return false;
    }
    const entry = experience.capabilities.find((capability) => capability.capability_id === capabilityId);
    if (entry === undefined) return false;
    return entry.tools === null || entry.tools.some((tool) => tool.permission_id === permissionId);
  };
}
