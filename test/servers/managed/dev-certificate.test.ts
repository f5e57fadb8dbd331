import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { stat } from "node:fs/promises";
import { describe, it } from "node:test";
import {
  createDevCertificate,
  loadOrCreateDevCertificate,
} from "../../../src/servers/managed/dev-certificate.ts";
import { makeTempDir } from "../../helpers/temp-dir.ts";

describe("development certificate", () => {
  it("is an EC P-256 certificate for localhost and the loopback addresses", async () => {
    const certificate = await createDevCertificate({ hosts: ["managed.local"] });
    const x509 = new X509Certificate(certificate.cert);
    assert.equal(x509.publicKey.asymmetricKeyType, "ec");
    assert.equal(x509.checkHost("localhost"), "localhost");
    assert.equal(x509.checkHost("managed.local"), "managed.local");
    assert.equal(x509.checkIP("127.0.0.1"), "127.0.0.1");
    assert.ok(x509.checkPrivateKey((await import("node:crypto")).createPrivateKey(certificate.key)));
    assert.equal(x509.fingerprint256, certificate.fingerprint);
  });

  it("is kept in the state directory (key mode 0600) and reused", async () => {
    await using dir = await makeTempDir("dev-cert-");
    const first = await loadOrCreateDevCertificate(dir.path);
    assert.equal(first.created, true);
    assert.equal((await stat(first.keyFile)).mode & 0o777, 0o600);
    const second = await loadOrCreateDevCertificate(dir.path);
    assert.equal(second.created, false);
    assert.equal(second.fingerprint, first.fingerprint);
  });
});
