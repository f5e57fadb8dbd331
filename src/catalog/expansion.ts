import { isRecord, own, resolveFragment } from "./json-pointer.ts";

/** Raised when `$ref` chains nest deeper than the stack allows; the caller reports it. */
export class ExpansionDepthError extends Error {
  readonly code = "ref_nesting_too_deep";
}

/**
 * Counts the nodes a subtree would have with every internal `$ref` inlined, without
 * inlining anything: sizes are memoized per node, so the count costs time linear in the
 * document. A small document can reference one component from ten places, that one from
 * ten more, and so on: it would expand to millions of nodes in the parser's validator
 * and in the snapshots. Circular references count once.
 */
export class ExpansionCounter {
  readonly #document: Record<string, unknown>;
  readonly #sizes = new Map<object, number>();
  readonly #active = new Set<object>();

  constructor(document: Record<string, unknown>) {
    this.#document = document;
  }

  sizeOf(node: unknown): number {
    try {
      return this.#size(node);
    } catch (error) {
      if (error instanceof RangeError) throw new ExpansionDepthError("$ref chains nest too deeply");
      throw error;
    }
  }

  #size(node: unknown): number {
    if (typeof node !== "object" || node === null) return 1;
    const known = this.#sizes.get(node);
    if (known !== undefined) return known;
    if (this.#active.has(node)) return 1;
    this.#active.add(node);
    let size = 1;
    const ref = isRecord(node) ? own(node, "$ref") : undefined;
    if (typeof ref === "string") {
      const target = resolveFragment(this.#document, ref);
      size += target === undefined ? 0 : this.#size(target);
    }
    for (const child of Object.values(node)) size += this.#size(child);
    this.#active.delete(node);
    this.#sizes.set(node, size);
    return size;
  }
}
