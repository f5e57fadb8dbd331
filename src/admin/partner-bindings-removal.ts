import {
  type BindingIndexRecord,
  bindingCollections,
  type WorkloadClientIndexRecord,
} from "../store/binding-model.ts";
import type { AdminDeps } from "./deps.ts";
import { scanAll } from "./store-scan.ts";

export interface BindingsRemoval {
  readonly bindings: number;
  readonly workload_clients: number;
}

/**
 * Removes a partner's headless bindings so that nothing of them authenticates again: its
 * workload clients first (every workload token is checked against its client record on each
 * request, so a token already issued stops working at once), then mappings and stored
 * idempotent results (which could replay data), then the bindings. The invocation evidence
 * stays, like the audit logs.
 */
export async function removePartnerBindings(
  deps: Pick<AdminDeps, "store">,
  partnerId: string,
): Promise<BindingsRemoval> {
  const { store } = deps;
  const bindings = await scanAll<BindingIndexRecord>(
    store,
    bindingCollections.partnerBindings,
    `${partnerId}/`,
  );
  let workloadClients = 0;
  for (const { id: indexId, value: index } of bindings) {
    const prefix = `${index.binding_id}/`;
    for (const client of await scanAll<WorkloadClientIndexRecord>(
      store,
      bindingCollections.bindingWorkloadClients,
      prefix,
    )) {
      await store.delete(bindingCollections.workloadClients, client.value.client_id);
      await store.delete(bindingCollections.bindingWorkloadClients, client.id);
      workloadClients++;
    }
    for (const collection of [bindingCollections.mappings, bindingCollections.idempotency]) {
      for (const item of await scanAll(store, collection, prefix)) await store.delete(collection, item.id);
    }
    await store.delete(bindingCollections.experiences, index.binding_id);
    await store.delete(bindingCollections.bindings, index.binding_id);
    await store.delete(bindingCollections.partnerBindings, indexId);
  }
  return { bindings: bindings.length, workload_clients: workloadClients };
}
