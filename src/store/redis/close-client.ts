import type { Redis } from "ioredis";

/**
 * Closes an ioredis connection: QUIT when it is ready, so the server finishes the replies
 * already sent, but never waiting longer than `timeoutMs` for it; then disconnects, which
 * also stops ioredis from reconnecting.
 */
export async function closeRedisClient(client: Redis, timeoutMs: number): Promise<void> {
  if (client.status === "ready") {
    const quit = client.quit().catch(() => undefined);
    const limit = new Promise<void>((resolve) => setTimeout(resolve, timeoutMs).unref());
    await Promise.race([quit, limit]);
  }
  client.disconnect();
}
