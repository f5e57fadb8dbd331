// oidc-provider ships no types; this is the small surface the suite uses (interop, user grants).
declare module "oidc-provider" {
  import type { IncomingMessage, ServerResponse } from "node:http";

  export interface InteractionDetails {
    readonly uid: string;
    readonly grantId?: string;
    readonly params: Readonly<Record<string, unknown>>;
    readonly prompt: { readonly name: string };
  }

  export interface GrantInstance {
    addOIDCScope(scope: string): void;
    addResourceScope(resource: string, scope: string): void;
    save(): Promise<string>;
  }

  /** The Koa context a custom grant type handler receives (only what the suite reads). */
  export interface GrantContext {
    readonly oidc: {
      readonly params: Readonly<Record<string, string | undefined>>;
      readonly client: { readonly clientId: string };
    };
    body: unknown;
  }

  export default class Provider {
    constructor(issuer: string, configuration?: Record<string, unknown>);
    callback(): (request: IncomingMessage, response: ServerResponse) => void;
    interactionDetails(request: IncomingMessage, response: ServerResponse): Promise<InteractionDetails>;
    interactionFinished(
      request: IncomingMessage,
      response: ServerResponse,
      result: Record<string, unknown>,
      options?: { mergeWithLastSubmission?: boolean },
    ): Promise<void>;
    registerGrantType(
      name: string,
      handler: (ctx: GrantContext, next: () => Promise<void>) => Promise<void>,
      params?: readonly string[],
      dupes?: readonly string[],
    ): void;
    on(event: "grant.success" | "grant.error", listener: (ctx: GrantContext) => void): this;
    readonly Grant: new (init: {
      accountId: string;
      clientId: string;
    }) => GrantInstance;
  }

  export const errors: {
    readonly InvalidGrant: new (description: string) => Error;
  };
}
