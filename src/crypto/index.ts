/** Public API of the post-quantum crypto layer. See docs/crypto.md. */

export { decrypt, ENCRYPT_AAD, encrypt } from "./encrypt.ts";
export {
  assertKeyId,
  deserializeEnvelope,
  ENVELOPE_MAGIC,
  ENVELOPE_VERSION,
  envelopeKeyId,
  type ParsedEnvelope,
  parseEnvelope,
  SUITE_MLKEM768_AES256GCM,
  type Suite,
  serializeEnvelope,
} from "./envelope.ts";
export { CryptoError, type CryptoErrorCode, cryptoErrorMessages, isCryptoError } from "./errors.ts";
export {
  initKek,
  KEK_BYTES,
  Kek,
  type LoadKekOptions,
  loadKek,
  unwrapKeyRing,
  type WrappedKeyRing,
  type WrappedKeyVersion,
  wrapKeyRing,
} from "./kek.ts";
export {
  generateKeyPair as generateKemKeyPair,
  type OpenOptions,
  open,
  type SealOptions,
  seal,
  sealBytes,
} from "./kem.ts";
export {
  KeyRing,
  type KeyStatus,
  type KeyVersion,
  newKeyId,
  PUBLIC_KEYS_FORMAT,
  type PublicKeyJson,
  PublicKeyRing,
  type PublicKeyRingJson,
  type PublicKeyVersion,
  type Recipient,
  type RecipientKeyLookup,
  type Signer,
  type SignerKeyLookup,
  signerKeyLookup,
} from "./key-ring.ts";
export {
  exportPrivateSeed,
  exportRawPublicKey,
  importPrivateSeed,
  importPublicKey,
  KEM_ALGORITHM,
  KEY_SIZES,
  type KeyAlgorithm,
  type KeyPair,
  SIG_ALGORITHM,
} from "./keys.ts";
export {
  type DecryptVerifyOptions,
  decodeSignedBlob,
  decryptVerify,
  decryptVerifyAsync,
  encodeSignedBlob,
  formatSignedAt,
  parseSignedDocument,
  SIGN_ENCRYPT_CONTEXT,
  SIGNED_BLOB_VERSION,
  SIGNED_DOCUMENT_TYPE,
  type SignEncryptOptions,
  type SignedDocument,
  signEncrypt,
  signEncryptAsync,
  type VerifiedMessage,
  type VerifiedSignedBlob,
  type VerifySignedBlobOptions,
  verifySignedBlob,
} from "./sign-encrypt.ts";
export {
  assertValidSignature,
  generateKeyPair as generateSigKeyPair,
  MAX_CONTEXT_BYTES,
  SIGNATURE_BYTES,
  sign,
  signAsync,
  verify,
  verifyAsync,
} from "./signature.ts";
