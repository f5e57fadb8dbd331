import { sha256Hex } from "../core/canonical-json.ts";

const MAX_SLUG = 200;

/**
 * A stable id for an operation without operationId, from its method and path only
 * ("GET /customers/{id}/payment-methods" → "get_customers_by_id_payment_methods"), so a
 * re-import of the same document yields the same id.
 */
export function deriveOperationId(method: string, path: string): string {
  const parts = path
    .split("/")
    .filter((s) => s.length > 0)
    .map((segment) =>
      segment
        .replace(/\{([^{}]*)\}/g, "_by_$1_")
        .replace(/[^A-Za-z0-9]+/g, "_")
        .replace(/^_+|_+$/g, "")
        .toLowerCase(),
    )
    .filter((s) => s.length > 0);
  const slug = parts.length === 0 ? "root" : parts.join("_");
  return `${method.toLowerCase()}_${slug}`.slice(0, MAX_SLUG);
}

/** The derived id made unique by a short hash of the operation's own method and path. */
export function disambiguateOperationId(derived: string, method: string, path: string): string {
  return `${derived}_${sha256Hex(`${method.toUpperCase()} ${path}`).slice(0, 8)}`;
}
