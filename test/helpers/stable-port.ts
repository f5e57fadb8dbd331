/**
 * A free loopback port for a server that a test stops and starts again on the same port.
 * It is picked below Linux's ephemeral range (32768–60999): a port the OS hands out could be
 * taken, while the server is down, as the local port of a parallel test's outgoing
 * connection, and the restart would then fail with EADDRINUSE.
 */
import { createServer } from "node:net";

const LOW = 20_000;
const SPAN = 12_000;

export async function stablePort(host = "127.0.0.1"): Promise<number> {
  for (;;) {
    const port = LOW + Math.floor(Math.random() * SPAN);
    const server = createServer();
    const free = await new Promise<boolean>((resolve) => {
      server.once("error", () => resolve(false));
      server.listen(port, host, () => resolve(true));
    });
    if (free) {
      await new Promise((resolve) => server.close(resolve));
      return port;
    }
  }
}
