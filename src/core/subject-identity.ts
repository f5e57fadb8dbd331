/**
 * Which authenticated principals a subject stands for (pure). Subject ids are global, so an
 * id alone proves nothing about who may act as the subject: a partner admin can name a
 * subject after anyone's token `sub`. A subject therefore also says how its principals are
 * vouched for, and a principal outside the subject's partner never resolves to it.
 * docs/decisions/0701-subject-ownership.md.
 */

/**
 * - `partner_token`: a bearer token whose `sub` is the subject id and whose `partner_id`
 *   claim names the subject's partner (the issuer vouches that the principal is the
 *   partner's). What a partner admin creates.
 * - `platform_vouched`: the platform admin vouched that this `sub` is the partner's: a token
 *   with that `sub` and no `partner_id` claim (or the subject's partner) stands for it.
 * - `binding`: an external subject of a headless binding: reached only through the
 *   server-side derivation of binding invoke, never by a bearer token's `sub`.
 */
export const subjectIdentities = ["partner_token", "platform_vouched", "binding"] as const;
export type SubjectIdentity = (typeof subjectIdentities)[number];

/** Prefix of the ids derived for external subjects (src/bindings/derive.ts): never chosen by anyone. */
export const DERIVED_SUBJECT_PREFIX = "ext_";

export interface IdentifiedSubject {
  readonly partner_id: string;
  readonly subject_type: string;
  /** Absent on records written before subjects carried it: read as the strictest kind. */
  readonly identity?: unknown;
}

export function isSubjectIdentity(value: unknown): value is SubjectIdentity {
  return typeof value === "string" && (subjectIdentities as readonly string[]).includes(value);
}

/** The record's identity kind; a record without a valid one is `binding` (external) or `partner_token`. */
export function identityOf(subject: IdentifiedSubject): SubjectIdentity {
  if (isSubjectIdentity(subject.identity)) return subject.identity;
  return subject.subject_type === "external" ? "binding" : "partner_token";
}

/** How the caller of a runtime path was authenticated. */
export type SubjectAuthentication =
  /**
   * A bearer token: its `sub` named the subject; `partnerId` is its (mapped) partner claim, if
   * any; `vouchable` says whether its issuer is one whose bare `sub` a platform admin vouches
   * for (the primary issuer by default; docs/decisions/1201-trusted-issuers.md).
   */
  | { readonly via: "bearer"; readonly partnerId: string | undefined; readonly vouchable: boolean }
  /** Binding invoke: the subject was derived from the binding of this partner. */
  | { readonly via: "binding"; readonly partnerId: string };

/** True when the authenticated principal may act as this subject. */
export function subjectAdmits(
  subject: Pick<IdentifiedSubject, "partner_id"> & { readonly identity: SubjectIdentity },
  auth: SubjectAuthentication,
): boolean {
  if (auth.via === "binding") return subject.identity === "binding" && auth.partnerId === subject.partner_id;
  switch (subject.identity) {
    case "partner_token":
      return auth.partnerId === subject.partner_id;
    case "platform_vouched":
      return auth.partnerId === subject.partner_id || (auth.partnerId === undefined && auth.vouchable);
    default:
      return false;
  }
}
