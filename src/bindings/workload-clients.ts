/**
 * Workload clients of a binding: the partner's servers authenticate with a client id and
 * secret (stored only as a scrypt hash) to get binding-scoped tokens. Several clients may
 * be active at once, so a secret rotates by creating the next client, deploying it, and
 * revoking the old one — without downtime.
 */
import type { AdminDeps } from "../admin/deps.ts";
import { type PageOf, type PageRequest, pageUnder } from "../admin/store-scan.ts";
import { AuthorityError } from "../errors.ts";
import { hashSecret, verifyAgainstDummy, verifySecret } from "../identity/secret-hash.ts";
import {
  type BindingRecord,
  bindingCollections,
  bindingKeys,
  INVOKE_SCOPE,
  type WorkloadClientIndexRecord,
  type WorkloadClientRecord,
  type WorkloadScope,
  workloadScopes,
} from "../store/binding-model.ts";
import { newClientSecret, randomId } from "./derive.ts";

export interface CreateWorkloadClientInput {
  readonly name: string;
  /** Default: [authority/bindings.invoke]. */
  readonly scopes?: readonly string[];
}

/** What a caller may see of a client: never the hash. */
export type WorkloadClientView = Omit<WorkloadClientRecord, "secret_hash">;

export interface CreatedWorkloadClient {
  readonly client: WorkloadClientView;
  /** Shown once; only its hash is stored. */
  readonly client_secret: string;
}

const CLIENT_ID = /^wlc_[A-Za-z0-9_-]{16}$/;

export function toWorkloadClientView(record: WorkloadClientRecord): WorkloadClientView {
  const { secret_hash: _hash, ...visible } = record;
  return visible;
}

function checkScopes(scopes: readonly string[]): WorkloadScope[] {
  const known = workloadScopes as readonly string[];
  const unknown = scopes.filter((scope) => !known.includes(scope));
  if (scopes.length === 0 || unknown.length > 0) {
    throw new AuthorityError("invalid_request", `scopes must be a non-empty subset of ${known.join(", ")}.`, {
      details: { field: "scopes" },
    });
  }
  return [...new Set(scopes)] as WorkloadScope[];
}

export async function createWorkloadClient(
  deps: AdminDeps,
  binding: BindingRecord,
  input: CreateWorkloadClientInput,
): Promise<CreatedWorkloadClient> {
  if (input.name.length === 0 || input.name.length > 256) {
    throw new AuthorityError("invalid_request", "name must be 1-256 characters.", {
      details: { field: "name" },
    });
  }
  const secret = newClientSecret();
  const record: WorkloadClientRecord = {
    client_id: randomId("wlc"),
    binding_id: binding.binding_id,
    partner_id: binding.partner_id,
    name: input.name,
    scopes: checkScopes(input.scopes ?? [INVOKE_SCOPE]),
    secret_hash: await hashSecret(secret),
    status: "active",
    created_at: deps.now().toISOString(),
    revoked_at: null,
  };
  if (!(await deps.store.create(bindingCollections.workloadClients, record.client_id, record))) {
    throw new AuthorityError("conflict", "Client id collision; retry.");
  }
  const index: WorkloadClientIndexRecord = { binding_id: binding.binding_id, client_id: record.client_id };
  await deps.store.put(
    bindingCollections.bindingWorkloadClients,
    bindingKeys.bindingWorkloadClient(binding.binding_id, record.client_id),
    index,
  );
  return { client: toWorkloadClientView(record), client_secret: secret };
}

/** The client record by id, or undefined (unknown ids never reach a store key). */
export async function findWorkloadClient(
  deps: Pick<AdminDeps, "store">,
  clientId: string,
): Promise<WorkloadClientRecord | undefined> {
  if (!CLIENT_ID.test(clientId)) return undefined;
  return deps.store.get<WorkloadClientRecord>(
    bindingCollections.workloadClients,
    bindingKeys.workloadClient(clientId),
  );
}

export async function listWorkloadClients(
  deps: Pick<AdminDeps, "store">,
  binding: BindingRecord,
  request: PageRequest,
): Promise<PageOf<WorkloadClientView>> {
  const page = await pageUnder<WorkloadClientIndexRecord>(
    deps.store,
    bindingCollections.bindingWorkloadClients,
    `${binding.binding_id}/`,
    request,
  );
  const items: WorkloadClientView[] = [];
  for (const item of page.items) {
    const client = await findWorkloadClient(deps, item.value.client_id);
    if (client !== undefined && client.binding_id === binding.binding_id)
      items.push(toWorkloadClientView(client));
  }
  return page.next === undefined ? { items } : { items, next: page.next };
}

/** Revokes at once: the next request with any token of this client is refused. Idempotent. */
export async function revokeWorkloadClient(
  deps: AdminDeps,
  binding: BindingRecord,
  clientId: string,
): Promise<WorkloadClientView> {
  const client = await findWorkloadClient(deps, clientId);
  if (client === undefined || client.binding_id !== binding.binding_id) {
    throw new AuthorityError("not_found", "No such workload client in this binding.");
  }
  if (client.status === "revoked") return toWorkloadClientView(client);
  const revoked: WorkloadClientRecord = {
    ...client,
    status: "revoked",
    revoked_at: deps.now().toISOString(),
  };
  await deps.store.put(bindingCollections.workloadClients, bindingKeys.workloadClient(clientId), revoked);
  return toWorkloadClientView(revoked);
}

/**
 * Checks client credentials for the token endpoint. Unknown, revoked and wrong-binding
 * clients cost the same scrypt work as a real check, so timing does not tell them apart.
 */
export async function authenticateWorkloadClient(
  deps: Pick<AdminDeps, "store">,
  bindingId: string,
  clientId: string,
  secret: string,
): Promise<WorkloadClientRecord | undefined> {
  const client = await findWorkloadClient(deps, clientId);
  if (client === undefined || client.status !== "active" || client.binding_id !== bindingId) {
    await verifyAgainstDummy(secret);
    return undefined;
  }
  let ok = false;
  try {
    ok = await verifySecret(secret, client.secret_hash);
  } catch {
    ok = false;
  }
  return ok ? client : undefined;
}
