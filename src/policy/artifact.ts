import {
  type ApisSectionBytes,
  CRYPTO_VERSION_V2,
  canonicalJson,
  POLICY_SCHEMA_V1,
  type PolicyDocument,
  type PolicyValidationOptions,
  parsePolicyDocument,
  type Sha256Ref,
  sha256Hex,
  validatePolicyDocument,
} from "../core/index.ts";
import type { CryptoVersion } from "../store/model.ts";
import {
  type OpenOptions,
  type PolicyOpener,
  type PolicyProtectionContext,
  PolicyProtectionError,
  type PolicyProtector,
} from "./protector.ts";

export interface ProtectedPolicy {
  readonly artifact: string;
  readonly documentHash: Sha256Ref;
}

function cryptoVersionOf(document: PolicyDocument): CryptoVersion {
  return document.schema_version === POLICY_SCHEMA_V1 ? "subject_credentials_v1" : CRYPTO_VERSION_V2;
}

/** Canonicalize, hash, sign-encrypt. The canonical text is what is signed and what is hashed. */
export async function protectPolicy(
  document: PolicyDocument,
  protector: PolicyProtector,
  partnerId: string,
): Promise<ProtectedPolicy> {
  const canonical = canonicalJson(validatePolicyDocument(document));
  const context: PolicyProtectionContext = {
    cryptoVersion: cryptoVersionOf(document),
    subjectId: document.subject.subject_id,
    partnerId,
  };
  // The hash of the very text that is signed (= hashCanonical(document)), canonicalized once.
  const documentHash: Sha256Ref = `sha256:${sha256Hex(canonical)}`;
  return { artifact: await protector.protect(canonical, context), documentHash };
}

/** An opened policy plus facts about the signed text, for callers that bind it to a stored record. */
export interface OpenedPolicyDocument {
  readonly document: PolicyDocument;
  /** sha256 of the exact signed text: equals the record's document_hash when the text is canonical. */
  readonly documentHash: Sha256Ref;
  readonly signer: string;
  readonly signedAt: string;
  /** parsePolicyDocument's key of the `apis` section (the bytes up to its end), when it was parsed alone. */
  readonly apisHash?: Sha256Ref;
  /** With `apisHash`: the bytes it is the hash of, and SHA-256 run over them. */
  readonly apisSection?: ApisSectionBytes;
}

/**
 * Decrypt-verify, parse, schema-validate, and check that the document's version path
 * matches the crypto version it was stored under (v1 ⇔ subject_credentials_v1,
 * v2 ⇔ platform_service_v2). Any failure is `policy_unverifiable`; a crypto fault stays
 * `policy_protection_unavailable`. The signature is always verified; `validation` may name
 * entries and `apis` sections validated before (parsePolicyDocument), `held` the bytes a signed
 * payload may start with and whose digest state is held (a verifier compares them).
 */
export async function openPolicyDocument(
  artifact: string | Uint8Array,
  protector: PolicyOpener,
  context: PolicyProtectionContext,
  validation: PolicyValidationOptions = {},
  held: Pick<OpenOptions, "heldPrefix"> = {},
): Promise<OpenedPolicyDocument> {
  // The decision needs the text only; the signed blob is what the sidecar route asks for.
  const options: OpenOptions = { ...held, signedBlob: false };
  const opened =
    typeof artifact === "string"
      ? await protector.open(artifact, context, options)
      : protector.openSigned !== undefined
        ? await protector.openSigned(artifact, context, held)
        : await protector.open(
            Buffer.from(artifact.buffer, artifact.byteOffset, artifact.byteLength).toString("base64"),
            context,
            options,
          );
  let parsed: ReturnType<typeof parsePolicyDocument>;
  try {
    parsed = parsePolicyDocument(opened.documentBytes ?? opened.document, validation);
  } catch (error) {
    throw new PolicyProtectionError("policy_unverifiable", "policy content is invalid", { cause: error });
  }
  const { document, textHash, apisHash, apisSection } = parsed;
  if (cryptoVersionOf(document) !== context.cryptoVersion) {
    throw new PolicyProtectionError("policy_unverifiable", "policy schema does not match its crypto version");
  }
  return {
    document,
    documentHash: textHash,
    signer: opened.signer,
    signedAt: opened.signedAt,
    ...(apisHash === undefined ? {} : { apisHash }),
    ...(apisSection === undefined ? {} : { apisSection }),
  };
}

/** openPolicyDocument, returning only the validated document. */
export async function openPolicy(
  artifact: string,
  protector: PolicyOpener,
  context: PolicyProtectionContext,
): Promise<PolicyDocument> {
  return (await openPolicyDocument(artifact, protector, context)).document;
}
