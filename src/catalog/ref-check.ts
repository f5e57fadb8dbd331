import type { ProblemList } from "./errors.ts";
import { appendPointer, isRecord, resolveFragment } from "./json-pointer.ts";

const quote = (ref: string): string => JSON.stringify(ref.length > 200 ? `${ref.slice(0, 200)}...` : ref);

/**
 * Every `$ref` must point inside the document and resolve. External references (other
 * files, URLs) are refused before the parser sees the document, so nothing is ever read
 * from disk or fetched on an admin's behalf.
 */
export function checkReferences(document: Record<string, unknown>, problems: ProblemList): void {
  const stack: Array<{ value: unknown; pointer: string }> = [{ value: document, pointer: "" }];
  while (stack.length > 0) {
    const item = stack.pop();
    if (item === undefined) break;
    const { value, pointer } = item;
    // Children are pushed in reverse so problems come out in document order.
    if (Array.isArray(value)) {
      for (let index = value.length - 1; index >= 0; index--) {
        stack.push({ value: value[index], pointer: appendPointer(pointer, index) });
      }
      continue;
    }
    if (!isRecord(value)) continue;
    const ref = Object.hasOwn(value, "$ref") ? value.$ref : undefined;
    if (typeof ref === "string") {
      const at = appendPointer(pointer, "$ref");
      if (!ref.startsWith("#")) {
        problems.add(
          at,
          `external $ref ${quote(ref)} is not allowed: references must stay inside the document (#/...)`,
        );
      } else if (resolveFragment(document, ref) === undefined) {
        problems.add(at, `$ref ${quote(ref)} does not resolve to anything in the document`);
      }
    }
    for (const [key, child] of Object.entries(value).reverse()) {
      if (typeof child === "object" && child !== null)
        stack.push({ value: child, pointer: appendPointer(pointer, key) });
    }
  }
}
