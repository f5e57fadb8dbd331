import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { type PostgresServerHandle, startPostgresServer } from "../helpers/postgres-server.ts";

/** The throwaway PostgreSQL the store tests will run against: it starts, answers, and leaves nothing. */
describe("startPostgresServer", () => {
  let pg: PostgresServerHandle;

  before(async () => {
    pg = await startPostgresServer();
  });
  after(() => pg.stop());

  it("serves SQL on its loopback port and its own socket directory", async () => {
    assert.match(pg.url, /^postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres$/);
    assert.equal(await pg.psql("select current_user"), "postgres");
    assert.equal(await pg.psql("show server_version_num").then((v) => v.slice(0, -4)), pg.version);
    assert.equal(await pg.psql(`show port`), String(pg.port));
    assert.equal(await pg.psql("show listen_addresses"), "127.0.0.1");
    assert.equal(await pg.psql("show unix_socket_directories"), pg.socketDir);
  });

  it("keeps what a transaction committed", async () => {
    await pg.psql("create table t (id int primary key, v text not null)");
    await pg.psql("begin; insert into t values (1, 'a'), (2, 'b'); commit");
    await assert.rejects(pg.psql("insert into t values (1, 'dup')"), /duplicate key/);
    assert.equal(await pg.psql("select string_agg(v, ',' order by id) from t"), "a,b");
  });

  it("removes its data directory when stopped", async () => {
    const other = await startPostgresServer();
    assert.equal(await other.psql("select 1"), "1");
    await other.stop();
    assert.equal(existsSync(other.socketDir), false);
    await assert.rejects(other.psql("select 1"));
  });
});
