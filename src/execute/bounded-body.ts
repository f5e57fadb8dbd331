/** The body did not fit the bound; nothing of it is kept. */
export class BodyTooLargeError extends Error {
  readonly limit: number;

  constructor(limit: number) {
    super(`response body exceeds ${limit} bytes`);
    this.name = "BodyTooLargeError";
    this.limit = limit;
  }
}

/**
 * Reads a whole response body, failing as soon as it would pass `maxBytes` (counted
 * after content decoding, so a compressed bomb is stopped too). A declared
 * Content-Length over the bound fails before reading anything. On failure the stream
 * is cancelled so the connection is released.
 */
export async function readBoundedBody(response: Response, maxBytes: number): Promise<Uint8Array> {
  const declared = Number(response.headers.get("content-length") ?? Number.NaN);
  const encoded = response.headers.get("content-encoding");
  if (Number.isFinite(declared) && declared > maxBytes && (encoded === null || encoded === "identity")) {
    await response.body?.cancel().catch(() => undefined);
    throw new BodyTooLargeError(maxBytes);
  }
  const stream = response.body;
  if (stream === null) return new Uint8Array(0);
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > maxBytes) {
        chunks.length = 0;
        await reader.cancel().catch(() => undefined);
        throw new BodyTooLargeError(maxBytes);
      }
      chunks.push(value);
    }
  } finally {
    reader.releaseLock();
  }
  const out = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}
