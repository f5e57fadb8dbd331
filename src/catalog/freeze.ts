/**
 * Freezes a JSON tree in place (iteratively, for deep trees) and returns it. Snapshots
 * are reviewed once and copied into policies: nothing downstream may edit them.
 */
export function deepFreeze<T>(value: T): T {
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const node = stack.pop();
    if (typeof node !== "object" || node === null || Object.isFrozen(node)) continue;
    Object.freeze(node);
    for (const child of Object.values(node)) stack.push(child);
  }
  return value;
}
