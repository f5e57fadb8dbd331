import type { Command } from "commander";

interface ExplainOptions {
  readonly url: string;
  readonly partner: string;
  readonly subject: string;
  readonly capability: string;
  readonly method: string;
  readonly path: string;
  readonly query?: string;
  readonly headers?: string;
  readonly body?: string;
}

function jsonOption(name: string, text: string | undefined): Record<string, unknown> {
  if (text === undefined) return {};
  try {
    return { [name]: JSON.parse(text) as unknown };
  } catch {
    throw new Error(`--${name} is not JSON`);
  }
}

/**
 * `authority explain`: asks a running authority's POST /partners/{id}/explain what it would
 * decide for one request, and prints the trace (docs/admin-api.md). The admin token comes
 * from AUTHORITY_TOKEN, never from an argument (argument lists are visible to other users).
 * Exits 1 when the request would be denied, so it can gate a script.
 */
export function register(program: Command): void {
  program
    .command("explain")
    .description("Explain what the authority would decide for one request, without executing it")
    .requiredOption("--url <url>", "the authority's base URL")
    .requiredOption("--partner <id>", "the partner")
    .requiredOption("--subject <id>", "the subject")
    .requiredOption("--capability <id>", "the capability")
    .requiredOption("--method <method>", "the HTTP method")
    .requiredOption("--path <path>", "the request path")
    .option("--query <json>", "query parameters (a JSON object)")
    .option("--headers <json>", "headers (a JSON object)")
    .option("--body <json>", "the request body (JSON)")
    .action(async (options: ExplainOptions, cmd: Command) => {
      const token = process.env.AUTHORITY_TOKEN;
      if (token === undefined || token === "")
        cmd.error("authority explain: set AUTHORITY_TOKEN to an admin token");
      let request: Record<string, unknown>;
      try {
        request = {
          subject_id: options.subject,
          capability_id: options.capability,
          method: options.method.toUpperCase(),
          path: options.path,
          ...jsonOption("query", options.query),
          ...jsonOption("headers", options.headers),
          ...jsonOption("body", options.body),
        };
      } catch (error) {
        cmd.error(`authority explain: ${(error as Error).message}`);
      }
      const url = new URL(`/partners/${encodeURIComponent(options.partner)}/explain`, options.url);
      const response = await fetch(url, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(request),
      });
      const answer = (await response.json()) as { result?: { status?: string } };
      process.stdout.write(`${JSON.stringify(answer, null, 2)}\n`);
      if (!response.ok) cmd.error(`authority explain: the authority answered ${response.status}`);
      if (answer.result?.status !== "allowed") process.exitCode = 1;
    });
}
