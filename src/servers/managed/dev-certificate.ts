/**
 * A self-signed TLS certificate for local use (`authority dev`, or `authority managed`
 * without --tls-cert/--tls-key): EC P-256, SHA-256, valid for localhost and the loopback
 * addresses. Clients trust it by pinning the certificate file (curl --cacert).
 */

import { X509Certificate } from "node:crypto";
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { generate } from "selfsigned";

export interface DevCertificate {
  readonly key: string;
  readonly cert: string;
  /** SHA-256 fingerprint, as `openssl x509 -fingerprint -sha256` prints it. */
  readonly fingerprint: string;
}

export interface DevCertificateOptions {
  /** Extra DNS names besides localhost. */
  readonly hosts?: readonly string[];
  /** Validity in days (default 365). */
  readonly days?: number;
}

export async function createDevCertificate(options: DevCertificateOptions = {}): Promise<DevCertificate> {
  const days = options.days ?? 365;
  const notBeforeDate = new Date(Date.now() - 60_000);
  const notAfterDate = new Date(notBeforeDate.getTime() + days * 86_400_000);
  const dnsNames = ["localhost", ...(options.hosts ?? [])];
  const pems = await generate([{ name: "commonName", value: "authority-managed-dev" }], {
    keyType: "ec",
    curve: "P-256",
    algorithm: "sha256",
    notBeforeDate,
    notAfterDate,
    extensions: [
      { name: "basicConstraints", cA: false },
      { name: "keyUsage", digitalSignature: true, critical: true },
      { name: "extKeyUsage", serverAuth: true },
      {
        name: "subjectAltName",
        altNames: [
          ...dnsNames.map((value) => ({ type: 2 as const, value })),
          { type: 7, ip: "127.0.0.1" },
          { type: 7, ip: "::1" },
        ],
      },
    ],
  });
  return { key: pems.private, cert: pems.cert, fingerprint: new X509Certificate(pems.cert).fingerprint256 };
}

export interface StoredDevCertificate extends DevCertificate {
  readonly certFile: string;
  readonly keyFile: string;
  readonly created: boolean;
}

function hasCode(error: unknown, code: string): boolean {
  return typeof error === "object" && error !== null && "code" in error && error.code === code;
}

/**
 * The certificate in `<dir>/managed-tls.{crt,key}`, created (key file mode 0600) when
 * absent or expired, so clients can keep trusting the same file across restarts.
 */
export async function loadOrCreateDevCertificate(dir: string): Promise<StoredDevCertificate> {
  const certFile = join(dir, "managed-tls.crt");
  const keyFile = join(dir, "managed-tls.key");
  try {
    const [cert, key] = await Promise.all([readFile(certFile, "utf8"), readFile(keyFile, "utf8")]);
    const x509 = new X509Certificate(cert);
    if (Date.parse(x509.validTo) > Date.now() + 86_400_000) {
      return { key, cert, fingerprint: x509.fingerprint256, certFile, keyFile, created: false };
    }
  } catch (error) {
    if (!hasCode(error, "ENOENT")) throw error;
  }
  const created = await createDevCertificate();
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await writeFile(keyFile, created.key, { mode: 0o600 });
  await chmod(keyFile, 0o600);
  await writeFile(certFile, created.cert, { mode: 0o644 });
  return { ...created, certFile, keyFile, created: true };
}
