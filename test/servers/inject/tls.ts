import { X509Certificate } from "node:crypto";
import { request } from "node:https";
import { TLSSocket } from "node:tls";
import { generate } from "selfsigned";

/** A self-signed certificate valid for 127.0.0.1 and the in-cluster service name (for a year, or until notAfterDate). */
export async function selfSignedCert(
  commonName = "authority-injector.authority-system.svc",
  notAfterDate?: Date,
) {
  const pems = await generate([{ name: "commonName", value: commonName }], {
    ...(notAfterDate === undefined ? {} : { notAfterDate }),
    keyType: "ec",
    curve: "P-256",
    algorithm: "sha256",
    extensions: [
      { name: "basicConstraints", cA: true },
      { name: "keyUsage", digitalSignature: true, keyCertSign: true },
      { name: "extKeyUsage", serverAuth: true },
      {
        name: "subjectAltName",
        altNames: [
          { type: 2, value: commonName },
          { type: 7, ip: "127.0.0.1" },
        ],
      },
    ],
  });
  return { cert: pems.cert, key: pems.private, fingerprint: new X509Certificate(pems.cert).fingerprint256 };
}

export interface HttpsAnswer {
  readonly status: number;
  readonly body: string;
  readonly peerFingerprint: string;
}

/** One HTTPS request that verifies the server against `ca` (as the API server does with caBundle). */
export function httpsRequest(
  url: string,
  options: { ca: string; method?: string; body?: string; contentType?: string },
): Promise<HttpsAnswer> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: options.method ?? "GET",
        ca: options.ca,
        agent: false,
        headers:
          options.body === undefined ? {} : { "content-type": options.contentType ?? "application/json" },
      },
      (res) => {
        const socket = res.socket;
        const peer = socket instanceof TLSSocket ? socket.getPeerX509Certificate() : undefined;
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            body: Buffer.concat(chunks).toString("utf8"),
            peerFingerprint: peer?.fingerprint256 ?? "",
          }),
        );
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(options.body);
  });
}
