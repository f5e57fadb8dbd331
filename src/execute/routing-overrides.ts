/**
 * Headers and parameters that make common upstream frameworks run another operation than
 * the one the request names (method overrides, URL rewrites). Never an input, whatever a
 * snapshot declares: the decision was taken on the method and path, and they must stay
 * the operation the upstream runs.
 */
export const ROUTING_OVERRIDE_HEADERS: ReadonlySet<string> = new Set([
  "x-http-method-override",
  "x-http-method",
  "x-method-override",
  "x-original-method",
  "x-original-url",
  "x-original-uri",
  "x-rewrite-url",
]);

/** Query parameters and top-level JSON body members that frameworks read as a method override. */
export const ROUTING_OVERRIDE_PARAMETERS: ReadonlySet<string> = new Set(["_method", "_httpmethod"]);
