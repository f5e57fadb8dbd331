import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parse } from "yaml";
import {
  buildCatalogVersion,
  CatalogVersionError,
  catalogHash,
  catalogVersionKey,
} from "../../src/catalog/catalog-version.ts";
import { importOperations, parseOpenApiDocument } from "../../src/catalog/openapi-import.ts";
import type { OperationSnapshot } from "../../src/core/operation-snapshot.ts";
import { readExample } from "./helpers.ts";

type Json = Record<string, unknown>;

/** The object at a key path of a parsed document, for editing it in a test. */
function at(root: Json, ...keys: string[]): Json {
  let node: unknown = root;
  for (const key of keys) {
    assert.ok(typeof node === "object" && node !== null);
    node = (node as Json)[key];
  }
  assert.ok(typeof node === "object" && node !== null);
  return node as Json;
}

async function importCustomers(edit: (doc: Json) => void = () => {}) {
  const doc = parse(readExample("customers.yaml")) as Json;
  edit(doc);
  const result = importOperations(await parseOpenApiDocument(doc), {
    capabilityId: "customers",
    authProfileRef: "customers-static",
  });
  return result.operations;
}

describe("catalog versions", () => {
  it("starts at version 1 with every operation added", async () => {
    const operations = await importCustomers();
    const v1 = buildCatalogVersion(undefined, { capability_id: "customers", operations });
    assert.equal(v1.catalog_version, "1");
    assert.equal(v1.previous_version, null);
    assert.equal(v1.is_new_version, true);
    assert.deepEqual(v1.diff, {
      added: [
        "customers:delete:/customers/{customerId}",
        "customers:get:/customers",
        "customers:get:/customers/me",
        "customers:get:/customers/{customerId}",
        "customers:get:/customers/{customerId}/payment-methods",
        "customers:patch:/customers/{customerId}",
        "customers:post:/admin/customers/export",
        "customers:post:/customers",
      ],
      removed: [],
      changed: [],
      unchanged: 0,
    });
    assert.match(v1.catalog_hash, /^sha256:[0-9a-f]{64}$/);
  });

  it("keeps the version when a re-import is identical, whatever the operation order", async () => {
    const operations = await importCustomers();
    const previous = { catalog_version: "1", operations };
    const again = await importCustomers();
    const same = buildCatalogVersion(previous, { capability_id: "customers", operations: again });
    assert.equal(same.catalog_version, "1");
    assert.equal(same.is_new_version, false);
    assert.deepEqual(same.diff, { added: [], removed: [], changed: [], unchanged: 8 });
    const reversed = buildCatalogVersion(previous, {
      capability_id: "customers",
      operations: [...again].reverse(),
    });
    assert.equal(reversed.catalog_version, "1");
    assert.equal(reversed.catalog_hash, same.catalog_hash);
  });

  it("bumps the version and reports added, removed and changed permission IDs", async () => {
    const v1 = { catalog_version: "1", operations: await importCustomers() };
    const v2Operations = await importCustomers((doc) => {
      delete at(doc, "paths")["/admin/customers/export"];
      const rules = at(doc, "paths", "/customers/{customerId}", "get")["x-authority-redactions"] as unknown[];
      rules.push({ path: "/email", mode: "remove" });
      at(doc, "paths")["/customers/{customerId}/notes"] = {
        get: {
          operationId: "listNotes",
          parameters: [{ $ref: "#/components/parameters/CustomerId" }],
          responses: { "200": { description: "notes" } },
        },
      };
    });
    const v2 = buildCatalogVersion(v1, { capability_id: "customers", operations: v2Operations });
    assert.equal(v2.catalog_version, "2");
    assert.equal(v2.previous_version, "1");
    assert.equal(v2.is_new_version, true);
    assert.deepEqual(v2.diff, {
      added: ["customers:get:/customers/{customerId}/notes"],
      removed: ["customers:post:/admin/customers/export"],
      changed: ["customers:get:/customers/{customerId}"],
      unchanged: 6,
    });
    const v3 = buildCatalogVersion(
      { catalog_version: v2.catalog_version, operations: v2Operations },
      { capability_id: "customers", operations: await importCustomers() },
    );
    assert.equal(v3.catalog_version, "3");
  });

  it("never changes the previous version's snapshots", async () => {
    const operations = await importCustomers();
    const copy = structuredClone(operations);
    const changed = await importCustomers((doc) => {
      at(doc, "paths", "/customers", "get").summary = "List all customers";
    });
    const result = buildCatalogVersion(
      { catalog_version: "4", operations },
      { capability_id: "customers", operations: changed },
    );
    assert.equal(result.catalog_version, "5");
    assert.deepEqual(result.diff.changed, ["customers:get:/customers"]);
    assert.deepEqual(operations, copy);
    assert.ok(Object.isFrozen(operations[0]));
  });

  it("refuses malformed previous versions and duplicate permission IDs", async () => {
    const operations = await importCustomers();
    for (const bad of ["0", "01", "v2", "", "1.5", "2024-01-01T00:00:00Z"]) {
      assert.throws(
        () =>
          buildCatalogVersion(
            { catalog_version: bad, operations },
            { capability_id: "customers", operations },
          ),
        CatalogVersionError,
        bad,
      );
    }
    const first = operations[0] as OperationSnapshot;
    assert.throws(
      () => buildCatalogVersion(undefined, { capability_id: "customers", operations: [first, { ...first }] }),
      CatalogVersionError,
    );
    assert.throws(
      () =>
        buildCatalogVersion(
          { catalog_version: "999999999999999", operations: [] },
          { capability_id: "customers", operations },
        ),
      /overflow/,
    );
  });

  it("hashes the canonical form: equal content gives an equal hash, any change a different one", async () => {
    const a = await importCustomers();
    const b = await importCustomers();
    assert.equal(catalogHash("customers", a), catalogHash("customers", b));
    const c = await importCustomers((doc) => {
      at(doc, "paths", "/customers/me", "get")["x-authority-auth-profile"] = "other-profile";
    });
    assert.notEqual(catalogHash("customers", a), catalogHash("customers", c));
  });

  it("has fixed-width store keys that sort like the versions", () => {
    assert.equal(catalogVersionKey("7"), "000000000000007");
    const versions = ["1", "2", "9", "10", "11", "100"];
    assert.deepEqual(versions.map(catalogVersionKey).sort(), versions.map(catalogVersionKey));
    assert.throws(() => catalogVersionKey("x"), CatalogVersionError);
  });
});
