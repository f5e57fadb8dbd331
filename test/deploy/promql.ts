/**
 * Just enough PromQL reading to check what queries name: every series selector of an
 * expression (metric name and label matchers), and the names and label names a /metrics
 * exposition declares. Not a PromQL parser: it knows the lexical shapes the project's rules
 * and dashboard use (functions, aggregations with by/without, binary operators with on/ignoring,
 * range and subquery brackets, string and number literals), and throws on anything else, so
 * an expression it cannot read fails the check instead of passing it.
 */

export interface Matcher {
  readonly label: string;
  readonly op: "=" | "!=" | "=~" | "!~";
  readonly value: string;
}

export interface Selector {
  readonly metric: string;
  readonly matchers: readonly Matcher[];
}

/** Words that are not series names when they stand before `(`, `by` or `without`, or between operands. */
const KEYWORDS = new Set([
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "and",
  "or",
  "unless",
  "bool",
  "offset",
]);
const AGGREGATIONS = new Set([
  "sum",
  "min",
  "max",
  "avg",
  "group",
  "stddev",
  "stdvar",
  "count",
  "count_values",
  "bottomk",
  "topk",
  "quantile",
]);
/** Keywords followed by a parenthesised list of label names (not an expression). */
const LABEL_LISTS = new Set(["by", "without", "on", "ignoring", "group_left", "group_right"]);

const IDENT = /[a-zA-Z_:][a-zA-Z0-9_:]*/y;
const NUMBER = /(0x[0-9a-fA-F]+|[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?)/y;
const MATCHER = /\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|\})/y;

function skipSpace(text: string, at: number): number {
  let i = at;
  while (i < text.length && /\s/.test(text[i] ?? "")) i++;
  return i;
}

function closing(text: string, at: number, open: string, close: string): number {
  const end = text.indexOf(close, at);
  if (end < 0 || text.slice(at + 1, end).includes(open))
    throw new Error(`unbalanced ${open} at ${at}: ${text}`);
  return end;
}

function readMatchers(text: string, at: number): { matchers: Matcher[]; end: number } {
  const matchers: Matcher[] = [];
  let i = at + 1;
  if (text[skipSpace(text, i)] === "}") return { matchers, end: skipSpace(text, i) + 1 };
  for (;;) {
    MATCHER.lastIndex = i;
    const m = MATCHER.exec(text);
    if (m === null) throw new Error(`unreadable label matchers at ${i}: ${text}`);
    matchers.push({
      label: m[1] ?? "",
      op: m[2] as Matcher["op"],
      value: (m[3] ?? "").replace(/\\(.)/g, "$1"),
    });
    i = MATCHER.lastIndex;
    if (m[4] === "}") return { matchers, end: i };
  }
}

/** Every series selector in a PromQL expression. */
export function selectorsOf(expr: string): Selector[] {
  const out: Selector[] = [];
  let i = 0;
  while (i < expr.length) {
    const c = expr[i] ?? "";
    if (/\s/.test(c) || "()+-*/%^<>=!,".includes(c)) {
      i++;
    } else if (c === "[") {
      i = closing(expr, i, "[", "]") + 1; // a range or subquery: durations only
    } else if (c === '"' || c === "'") {
      const end = expr.indexOf(c, i + 1);
      if (end < 0) throw new Error(`unterminated string: ${expr}`);
      i = end + 1;
    } else if (c === "{") {
      throw new Error(`a selector without a metric name: ${expr}`);
    } else if (/[0-9.]/.test(c)) {
      NUMBER.lastIndex = i;
      if (NUMBER.exec(expr) === null) throw new Error(`unreadable number at ${i}: ${expr}`);
      i = NUMBER.lastIndex;
    } else {
      IDENT.lastIndex = i;
      const m = IDENT.exec(expr);
      if (m === null) throw new Error(`unexpected ${JSON.stringify(c)} at ${i}: ${expr}`);
      const word = m[0];
      i = IDENT.lastIndex;
      const next = skipSpace(expr, i);
      if (LABEL_LISTS.has(word) && expr[next] === "(") {
        i = closing(expr, next, "(", ")") + 1;
      } else if (
        KEYWORDS.has(word) ||
        (AGGREGATIONS.has(word) && /^(\(|by\b|without\b)/.test(expr.slice(next)))
      ) {
        // an operator word or an aggregation
      } else if (expr[next] === "(") {
        // a function call
      } else if (expr[next] === "{") {
        const { matchers, end } = readMatchers(expr, next);
        out.push({ metric: word, matchers });
        i = end;
      } else {
        out.push({ metric: word, matchers: [] });
      }
    }
  }
  return out;
}

/** A Grafana templating query: `label_values(<expr>, <label>)`, or a plain PromQL query. */
export function grafanaQuerySelectors(query: string): Selector[] {
  const labelValues = /^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$/s.exec(query);
  return selectorsOf(labelValues?.[1] ?? query);
}

/**
 * What a /metrics exposition declares: each series name (a histogram's `_bucket`, `_sum` and
 * `_count` too) with the label names and values its samples carry.
 */
export function exportedSeries(exposition: string): Map<string, Map<string, Set<string>>> {
  const series = new Map<string, Map<string, Set<string>>>();
  const entry = (name: string): Map<string, Set<string>> => {
    const labels = series.get(name) ?? new Map<string, Set<string>>();
    series.set(name, labels);
    return labels;
  };
  for (const line of exposition.split("\n")) {
    const type = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)$/.exec(line);
    if (type !== null) {
      const name = type[1] ?? "";
      const suffixes =
        type[2] === "histogram"
          ? ["_bucket", "_sum", "_count"]
          : type[2] === "summary"
            ? ["", "_sum", "_count"]
            : [""];
      for (const suffix of suffixes) entry(`${name}${suffix}`);
      continue;
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? /.exec(line);
    if (sample === null) continue;
    const labels = entry(sample[1] ?? "");
    for (const m of (sample[3] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      const name = m[1] ?? "";
      labels.set(name, (labels.get(name) ?? new Set()).add(m[2] ?? ""));
    }
  }
  return series;
}
