/**
 * Preloaded into every test file's process (`node --test --import`). Once the file's last
 * test and hook are done, the process gets a few seconds to end by itself; if a handle is
 * still open (say, a Redis client reconnecting forever after a failed test skipped its
 * cleanup) it exits anyway, naming the file, instead of hanging the whole run.
 *
 * Not `--test-force-exit`: on Node 24 it ended some files before their last suite ran.
 */
import { after } from "node:test";

const GRACE_MS = 5000;

if (process.env.NODE_TEST_CONTEXT?.startsWith("child") === true) {
  after(() => {
    setTimeout(() => {
      process.stderr.write(`exit-when-done: ${process.argv[1] ?? "a test file"} left handles open\n`);
      process.exit();
    }, GRACE_MS).unref();
  });
}
