/**
 * OPA's REST server (`opa run --server`, .tools/bin/opa, built from the Go module proxy by
 * scripts/ensure-test-peers.sh for `make bench`, pinned there) as the peer of POST
 * /v1/authorize-invocation, with bench/opa/authorize.rego and the seed's catalog and policy as
 * its data; and the decision set both must answer alike before either is measured
 * (bench/authorize.ts refuses to measure otherwise).
 */
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { type PeerProcess, projectTool, startPeerProcess } from "../../test/helpers/peer-process.ts";
import { stablePort } from "../../test/helpers/stable-port.ts";

/** scripts/ensure-test-peers.sh's OPA_VERSION: the build the bench names. */
export const OPA_VERSION = "v1.22.4";

export const OPA_POLICY = fileURLToPath(new URL("../opa/authorize.rego", import.meta.url));

/** What the authority's bench policy is, as OPA data (bench/opa/authorize.rego names the fields). */
export interface OpaData {
  readonly idp: { readonly jwks: string; readonly issuer: string; readonly audience: string };
  /** Capability id → its operations. */
  readonly catalog: Record<string, ReadonlyArray<{ readonly method: string; readonly path: string }>>;
  /** Subject id → capability id → allowed permission ids. */
  readonly policies: Record<string, Record<string, readonly string[]>>;
}

export interface OpaServer {
  readonly url: string;
  readonly pid: number;
  output(): string;
  stop(): Promise<void>;
}

/** `opa run --server` on a free loopback port with the bench policy and `data`; ready when /health is. */
export async function startOpa(data: OpaData, dir: string): Promise<OpaServer> {
  await mkdir(dir, { recursive: true });
  const dataFile = join(dir, "data.json");
  await writeFile(dataFile, JSON.stringify(data));
  const port = await stablePort();
  const peer: PeerProcess = startPeerProcess({
    command: projectTool("opa"),
    args: ["run", "--server", "--addr", `127.0.0.1:${port}`, "--log-level", "error", OPA_POLICY, dataFile],
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (!peer.running) throw new Error(`opa exited: ${peer.output()}`);
    if (Date.now() > deadline) {
      await peer.stop();
      throw new Error(`opa did not start: ${peer.output()}`);
    }
    const ok = await fetch(`${url}/health`).then(
      (response) => response.ok,
      () => false,
    );
    if (ok) break;
    await delay(50);
  }
  return { url, pid: await peer.pid, output: () => peer.output(), stop: () => peer.stop() };
}

/** Whose bearer token a decision request carries. */
export type InvocationCaller = "subject" | "unassigned subject" | "no token" | "forged";

/** One request of the decision set: the authorize-invocation body, the caller, the policy's answer. */
export interface InvocationCase {
  readonly caller: InvocationCaller;
  readonly body: {
    readonly subject?: { readonly subject_id: string };
    readonly capability_id: string;
    readonly method: string;
    readonly path: string;
  };
  readonly allowed: boolean;
}

const invocation = (
  method: string,
  path: string,
  allowed: boolean,
  more: { caller?: InvocationCaller; subjectId?: string | null; capabilityId?: string } = {},
): InvocationCase => {
  const subjectId = more.subjectId === undefined ? "agent-7" : more.subjectId;
  return {
    caller: more.caller ?? "subject",
    body: {
      ...(subjectId === null ? {} : { subject: { subject_id: subjectId } }),
      capability_id: more.capabilityId ?? "billing-api",
      method,
      path,
    },
    allowed,
  };
};

/**
 * The seed's policy (agent-7 on billing-api: GET /users/{id} and POST /invoices allowed; the
 * catalog also holds GET /users/me, DELETE /users/{id}, GET /invoices/{invoiceId}/lines/{lineId})
 * asked every way it answers: each allowed operation, the literal sibling of an allowed
 * template, catalog operations not allowed, paths the catalog lacks, another capability, a
 * body subject that is not the token's, and callers without a policy, a token or a valid one.
 */
export const INVOCATION_DECISIONS: readonly InvocationCase[] = [
  // bench/authorize.ts measures this one (the first) on both servers
  invocation("GET", "/users/42", true),
  invocation("POST", "/invoices", true),
  invocation("GET", "/users/abc-def", true),
  invocation("GET", "/users/42", true, { subjectId: null }),
  invocation("GET", "/users/me", false),
  invocation("DELETE", "/users/42", false),
  invocation("PUT", "/users/42", false),
  invocation("GET", "/invoices", false),
  invocation("GET", "/invoices/1/lines/2", false),
  invocation("GET", "/users/42/extra", false),
  invocation("GET", "/users", false),
  invocation("GET", "/nothing", false),
  invocation("GET", "/users/42", false, { capabilityId: "other-api" }),
  invocation("GET", "/users/42", false, { subjectId: "agent-8" }),
  invocation("GET", "/users/42", false, { caller: "unassigned subject", subjectId: "agent-9" }),
  invocation("GET", "/users/42", false, { caller: "no token" }),
  invocation("GET", "/users/42", false, { caller: "forged" }),
];

/** The same claims with one character of the signature changed: a token that does not verify. */
export function forgedToken(token: string): string {
  const [head, payload, signature = ""] = token.split(".");
  const flipped = signature[10] === "A" ? "B" : "A";
  return `${head}.${payload}.${signature.slice(0, 10)}${flipped}${signature.slice(11)}`;
}

export type CallerTokens = Readonly<Record<InvocationCaller, string | undefined>>;

/** POST /v1/authorize-invocation's answer: allowed when 200 with status "allowed". */
export function authorityRequest(url: string, tokens: CallerTokens, request: InvocationCase) {
  const token = tokens[request.caller];
  return {
    url: `${url}/v1/authorize-invocation`,
    headers: {
      "content-type": "application/json",
      ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
    },
    body: JSON.stringify(request.body),
  };
}

/** The same question to OPA: the token travels in the input (OPA's REST API reads no header). */
export function opaRequest(url: string, tokens: CallerTokens, request: InvocationCase) {
  const token = tokens[request.caller];
  return {
    url: `${url}/v1/data/authority/allow`,
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ input: { ...request.body, ...(token === undefined ? {} : { token }) } }),
  };
}

export interface DecisionComparison {
  readonly requests: readonly InvocationCase[];
  readonly authority: readonly boolean[];
  readonly opa: readonly boolean[];
}

async function post(request: { url: string; headers: Record<string, string>; body: string }) {
  const response = await fetch(request.url, { method: "POST", headers: request.headers, body: request.body });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/**
 * Both servers' answers to INVOCATION_DECISIONS; throws, naming the requests, when either
 * differs from the policy's answer: the two would not be doing the same work.
 */
export async function compareDecisions(
  authorityUrl: string,
  opaUrl: string,
  tokens: CallerTokens,
): Promise<DecisionComparison> {
  const authority: boolean[] = [];
  const opa: boolean[] = [];
  const wrong: string[] = [];
  for (const request of INVOCATION_DECISIONS) {
    const ours = await post(authorityRequest(authorityUrl, tokens, request));
    const theirs = await post(opaRequest(opaUrl, tokens, request));
    const oursAllowed = ours.status === 200 && ours.body.status === "allowed";
    const theirsAllowed = theirs.status === 200 && theirs.body.result === true;
    authority.push(oursAllowed);
    opa.push(theirsAllowed);
    const what = `${request.body.method} ${request.body.path} (${request.caller}, ${JSON.stringify(request.body)})`;
    if (oursAllowed !== request.allowed)
      wrong.push(`authority: ${what} → ${ours.status} ${ours.body.reason ?? ""}`);
    if (theirsAllowed !== request.allowed)
      wrong.push(`opa: ${what} → ${theirs.status} ${JSON.stringify(theirs.body)}`);
  }
  if (wrong.length > 0)
    throw new Error(`not measured: a server decides unlike the bench policy (${wrong.join("; ")})`);
  return { requests: INVOCATION_DECISIONS, authority, opa };
}
