/**
 * Which authenticated principals a subject stands for (pure). A subject also says how its
 * principals are vouched for, and a principal outside the subject's partner never resolves to
 * it (docs/decisions/0701-subject-ownership.md). The subjects a partner's own tokens stand for
 * live in that partner's namespace (`<partner>~<sub>`), so no partner can take an id another
 * partner's principals use (docs/decisions/2503-egress-gate-strict-claims-partner-subjects.md).
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

/** Between a partner id and a subject id in a partner's namespace: in neither id's alphabet. */
export const PARTNER_NAMESPACE_SEPARATOR = "~";

/** The id of the subject `localId` in partner `partnerId`'s namespace: `<partner>~<localId>`. */
export function partnerSubjectId(partnerId: string, localId: string): string {
  return `${partnerId}${PARTNER_NAMESPACE_SEPARATOR}${localId}`;
}

/**
 * The subject ids a bearer token with this `sub` may stand for, in lookup order: with a partner
 * claim, the partner's own namespace first, then the global one (subjects a platform admin
 * vouched for, and those created before partner namespaces); without one, only the global one.
 * Which of them admits the token is still `subjectAdmits`'s to say.
 */
export function subjectCandidates(sub: string, partnerId: string | undefined): readonly string[] {
  if (partnerId === undefined) return [sub];
  return [partnerSubjectId(partnerId, sub), sub];
}

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
