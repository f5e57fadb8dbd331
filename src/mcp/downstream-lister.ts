/**
 * Lists a downstream MCP server's tools for an admin's preview or import: the partner's auth
 * profile opened through the same injector as a call (credentials toward that server only),
 * the SDK client on the egress gate's fetch (downstream-client.ts), and every failure answered
 * in the service's words — never the server's or the transport's.
 */

import type { DownstreamToolLister } from "../admin/mcp-servers.ts";
import { importLimits } from "../catalog/limits.ts";
import { AuthorityError } from "../errors.ts";
import type { AuthInjector, AuthSession } from "../execute/auth-injector.ts";
import type { AuthProfile } from "../execute/auth-profiles.ts";
import { BodyTooLargeError } from "../execute/bounded-body.ts";
import { type EgressPolicy, egressDenialOf } from "../execute/egress.ts";
import { createSecretScrubber, injectedSecrets } from "../execute/secret-scrub.ts";
import { DownstreamExchangeError, type DownstreamListing, listDownstreamTools } from "./downstream-client.ts";

export interface DownstreamListerOptions {
  readonly egress: EgressPolicy;
  readonly injector: AuthInjector;
  /** The execution form of a partner's profile ("none": no credential). */
  readonly authProfile: (partnerId: string, profileRef: string) => Promise<AuthProfile>;
  readonly timeoutMs: number;
  readonly maxResponseBytes: number;
}

function unavailable(reason: string): AuthorityError {
  return new AuthorityError("upstream_unavailable", "The downstream MCP server could not be listed.", {
    details: { reason },
  });
}

function failureOf(error: unknown): AuthorityError {
  if (error instanceof AuthorityError) return error;
  const denial = egressDenialOf(error);
  if (denial !== undefined) {
    return new AuthorityError(
      "invalid_request",
      "The downstream server is not allowed by the platform's egress policy.",
      {
        details: { reason: "egress_denied", rule: denial.rule },
      },
    );
  }
  for (
    let cause: unknown = error, depth = 0;
    cause instanceof Error && depth < 8;
    cause = cause.cause, depth++
  ) {
    if (cause instanceof BodyTooLargeError) return unavailable("upstream_response_too_large");
    if (cause instanceof DownstreamExchangeError)
      return unavailable(cause.issue === "redirect" ? "upstream_redirect" : "upstream_response_too_large");
  }
  return unavailable("upstream_unreachable");
}

export function createDownstreamLister(options: DownstreamListerOptions): DownstreamToolLister {
  const { egress, injector, timeoutMs, maxResponseBytes } = options;
  return async ({ partnerId, url, authProfileRef }) => {
    let session: AuthSession;
    try {
      session = await injector.open(await options.authProfile(partnerId, authProfileRef), {});
    } catch {
      throw new AuthorityError(
        "invalid_request",
        "The auth profile cannot provide credentials for the server.",
        {
          details: { reason: "auth_profile_unavailable", auth_profile_ref: authProfileRef },
        },
      );
    }
    const list = () =>
      listDownstreamTools(
        url,
        { fetch: egress.partnerFetch, timeoutMs, maxResponseBytes, ...session.credentials },
        importLimits.maxOperations,
      );
    let listing: DownstreamListing;
    try {
      listing = await list().catch(async (error: unknown) => {
        // Listing reads only: one retry when the connection failed (a kept-alive socket the
        // server closed meanwhile), never after the gateway refused what it received.
        if (failureOf(error).details?.reason !== "upstream_unreachable") throw error;
        return list();
      });
    } catch (error) {
      throw failureOf(error);
    }
    // A server that shows the credential it was sent (in a description, a schema…) would have
    // it stored in the catalog and listed to agents: refused, whatever the field.
    const secrets = injectedSecrets(session.credentials, session.secrets);
    if (secrets.length > 0 && createSecretScrubber(secrets).scrubJson(listing).found > 0) {
      throw new AuthorityError(
        "invalid_request",
        "The downstream server's tool list shows a credential it was sent.",
        {
          details: { reason: "credential_echoed" },
        },
      );
    }
    return { tools: listing.tools, server: listing.server };
  };
}
