/**
 * Demo section on the managed crypto API: encrypt → decrypt and sign-encrypt →
 * decrypt-verify round trips over HTTPS (the development certificate pinned, as
 * `curl --cacert` would), with the five credential headers; then what a wrong password
 * and a wrong partner key get.
 */
import { readFile } from "node:fs/promises";
import { request } from "node:https";
import { DEV_IDP } from "../names.ts";
import { answerOf, type DemoContext, field, isRecord } from "./context.ts";

interface HttpsAnswer {
  readonly status: number;
  readonly body: unknown;
}

function postHttps(
  url: string,
  ca: string,
  headers: Record<string, string>,
  body: unknown,
): Promise<HttpsAnswer> {
  const payload = JSON.stringify(body);
  const req = request(url, {
    method: "POST",
    ca,
    headers: {
      ...headers,
      "content-type": "application/json",
      "content-length": Buffer.byteLength(payload),
    },
    timeout: 15_000,
  });
  return answerOf(req, payload);
}

const inner = (answer: HttpsAnswer): Record<string, unknown> =>
  isRecord(answer.body) && isRecord(answer.body.body) ? answer.body.body : {};

/** The stable reason of an error answer (`details.reason`, else `error`). */
const reasonOf = (answer: HttpsAnswer): string =>
  isRecord(answer.body) && isRecord(answer.body.details) && typeof answer.body.details.reason === "string"
    ? answer.body.details.reason
    : field(answer.body, "error");

const short = (value: unknown): string => {
  const text = String(value ?? "");
  return text.length > 24 ? `${text.slice(0, 24)}… (${text.length} chars)` : text;
};

export async function managedSection(ctx: DemoContext): Promise<void> {
  const { env, report } = ctx;
  report.section(
    "Managed crypto API (HTTPS, ML-KEM-768 + ML-DSA-65)",
    `${env.urls.managed}/v1/… with the headers username, password, api_key, access_key, secret_key;\n` +
      "the certificate is the self-signed development one, pinned like curl --cacert.",
  );
  const ca = await readFile(String(env.credentials.managed_tls_cert), "utf8");
  const headers = {
    username: DEV_IDP.serviceAccountUsername,
    password: env.secrets.serviceAccountPassword,
    api_key: env.partnerKeys.apiKey,
    access_key: env.partnerKeys.accessKey,
    secret_key: env.partnerKeys.secretKey,
  };
  const post = (path: string, body: unknown, override: Record<string, string> = {}) =>
    postHttps(`${env.urls.managed}/v1/${path}`, ca, { ...headers, ...override }, body);
  const plaintext = "card on file ends in 4242";

  const encrypted = await post("encrypt", { data: plaintext });
  const ciphertext = inner(encrypted).encrypted_data;
  report.check({
    label: `encrypt "${plaintext}"`,
    expected: "200 encrypted_data",
    actual: `${encrypted.status} ${typeof ciphertext === "string" ? "encrypted_data" : "no ciphertext"}`,
    detail: `encrypted_data: ${short(ciphertext)}`,
  });
  const decrypted = await post("decrypt", { encrypted_data: ciphertext });
  report.check({
    label: "decrypt it",
    expected: `200 "${plaintext}"`,
    actual: `${decrypted.status} "${field(inner(decrypted), "decrypted_data")}"`,
  });

  const signed = await post("sign-encrypt", { data: plaintext });
  const signedCiphertext = inner(signed).encrypted_data;
  report.check({
    label: `sign-encrypt "${plaintext}"`,
    expected: "200 encrypted_data",
    actual: `${signed.status} ${typeof signedCiphertext === "string" ? "encrypted_data" : "no ciphertext"}`,
  });
  const verified = await post("decrypt-verify", { encrypted_data: signedCiphertext });
  const v = inner(verified);
  report.check({
    label: "decrypt-verify it",
    expected: `200 "${plaintext}", valid signature`,
    actual: `${verified.status} "${field(v, "decrypted_data")}"${v.is_valid_signature === true ? ", valid signature" : ", signature NOT valid"}`,
    detail: `signed_by ${field(v, "signed_by")} at ${field(v, "signed_timestamp")}`,
  });
  const crossed = await post("decrypt", { encrypted_data: signedCiphertext });
  report.check({
    label: "decrypt the signed ciphertext as a plain one",
    expected: "400 invalid_ciphertext",
    actual: `${crossed.status} ${reasonOf(crossed)}`,
  });
  const wrongPassword = await post("encrypt", { data: plaintext }, { password: "not-the-password" });
  report.check({
    label: "encrypt with a wrong password",
    expected: "500 invalid_idp_credentials (as the spec answers it)",
    actual: `${wrongPassword.status} ${reasonOf(wrongPassword)}${wrongPassword.status === 500 ? " (as the spec answers it)" : ""}`,
  });
  const wrongKey = await post("encrypt", { data: plaintext }, { secret_key: `sk_${"x".repeat(43)}` });
  report.check({
    label: "encrypt with a wrong secret_key",
    expected: "403 invalid_partner_credentials",
    actual: `${wrongKey.status} ${reasonOf(wrongKey)}`,
  });
}
