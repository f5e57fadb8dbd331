import type { TokenSetStore } from "../../src/execute/auth-profiles.ts";
import { createClientCredentialsTokens } from "../../src/execute/client-credentials.ts";
import type { FetchLike } from "../../src/execute/egress.ts";
import {
  createExecutor,
  type ExecutionResult,
  type Executor,
  type ExecutorOptions,
  type SendRequest,
} from "../../src/execute/executor.ts";
import { enforceOperationInput } from "../../src/execute/input.ts";
import { createOAuthUserClient } from "../../src/execute/oauth-user.ts";
import { createTokenExchangeTokens } from "../../src/execute/token-exchange.ts";
import { buildUpstreamUrl } from "../../src/execute/url.ts";

/** A lone snapshot's call: the caller's arguments instead of a prepared request. */
export interface ExecuteRequest extends Omit<SendRequest, "prepared"> {
  /** `{ path?, query?, headers?, body? }` as the caller sent them. */
  readonly args: unknown;
  /** The policy-owner partner (parameter-scoping rollout). */
  readonly partnerId: string;
}

/**
 * The executor's stages for one snapshot, as the pipeline runs them (src/pipeline/enforce.ts):
 * the rollout gate's inputs, the input stage (schema, signed constraints), the upstream URL,
 * then the send stage production calls (egress → inject → deadline → scrub → redact). A lone
 * snapshot has no catalog, so the re-match of prepare.ts is left to its own tests.
 */
export async function executeOnce(
  executor: Pick<Executor, "send" | "rolloutFor">,
  request: ExecuteRequest,
): Promise<ExecutionResult> {
  const { args: raw, partnerId, ...send } = request;
  const rollout = await executor.rolloutFor(request.snapshot, partnerId);
  const args = enforceOperationInput(request.snapshot, raw, rollout);
  return executor.send({ ...send, prepared: { args, url: buildUpstreamUrl(request.snapshot, args) } });
}

/** The options tests give: the process's token caches are built here when a test does not pass its own. */
export type TestExecutorOptions = Omit<ExecutorOptions, "clientCredentials" | "oauthUser" | "tokenExchange"> &
  Partial<Pick<ExecutorOptions, "clientCredentials" | "oauthUser" | "tokenExchange">> & {
    readonly tokenSetStore: TokenSetStore;
    /** Deadline of one OAuth token request; default 5 s. */
    readonly tokenTimeoutMs?: number;
  };

/**
 * An executor wired as a composition root wires it: the token caches on the same fetch and
 * egress gate as the upstream calls (the executor builds none of its own).
 */
export function testExecutor(options: TestExecutorOptions): Executor {
  const { tokenSetStore, tokenTimeoutMs = 5000, ...rest } = options;
  const given = options.fetch;
  const fetch: FetchLike =
    given === undefined
      ? options.egress.fetch
      : (input, init) =>
          given(input, { ...init, dispatcher: options.egress.dispatcher } as unknown as RequestInit);
  const { secretResolver } = options;
  return createExecutor({
    ...rest,
    clientCredentials:
      options.clientCredentials ??
      createClientCredentialsTokens({ fetch, secretResolver, timeoutMs: tokenTimeoutMs }),
    oauthUser:
      options.oauthUser ??
      createOAuthUserClient({ fetch, secretResolver, tokenSetStore, timeoutMs: tokenTimeoutMs }),
    tokenExchange:
      options.tokenExchange ??
      createTokenExchangeTokens({ fetch, secretResolver, timeoutMs: tokenTimeoutMs }),
  });
}
