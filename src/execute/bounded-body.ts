import { promisify } from "node:util";
import {
  type BrotliOptions,
  brotliDecompress,
  gunzip,
  inflate,
  inflateRaw,
  type ZlibOptions,
  constants as zlibConstants,
} from "node:zlib";
import type { GatedReply } from "./egress.ts";

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

/** Drops a body not read whole; the abort that destroying it raises has no one to tell. */
export function discard(reply: GatedReply): void {
  reply.body.on("error", () => undefined);
  reply.body.destroy();
}

/** Statuses whose response has no body: fetch decodes nothing for them. */
const NULL_BODY_STATUSES: ReadonlySet<number> = new Set([101, 103, 204, 205, 304]);
/** At most this many codings are decoded (fetch's bound: more is a network error). */
const MAX_CONTENT_CODINGS = 5;

type Decoder = (input: Buffer, options: ZlibOptions & BrotliOptions) => Promise<Buffer>;
const gunzipAsync = promisify(gunzip) as Decoder;
const inflateAsync = promisify(inflate) as Decoder;
const inflateRawAsync = promisify(inflateRaw) as Decoder;
const brotliAsync = promisify(brotliDecompress) as Decoder;
/** As fetch decodes (lenient on a missing end, as curl and browsers are). */
const ZLIB_LENIENT = { finishFlush: zlibConstants.Z_SYNC_FLUSH };
const BROTLI_LENIENT = { finishFlush: zlibConstants.BROTLI_OPERATION_FLUSH };

/**
 * The decoders of a Content-Encoding, last applied first, as fetch (undici) picks them; none
 * when a coding is unknown (the body stays encoded, and the caller sees the header).
 */
function decodersOf(contentEncoding: string | null): ((input: Buffer, limit: number) => Promise<Buffer>)[] {
  if (contentEncoding === null) return [];
  const codings = contentEncoding.toLowerCase().split(",");
  if (codings.length > MAX_CONTENT_CODINGS) throw new TypeError("too many content codings");
  const decoders: ((input: Buffer, limit: number) => Promise<Buffer>)[] = [];
  for (const raw of codings.reverse()) {
    const coding = raw.trim();
    if (coding === "gzip" || coding === "x-gzip") {
      decoders.push((input, limit) => gunzipAsync(input, { ...ZLIB_LENIENT, maxOutputLength: limit }));
    } else if (coding === "deflate") {
      // zlib-wrapped or raw deflate, told apart by the first byte (as undici does).
      decoders.push((input, limit) =>
        input.length > 0 && ((input[0] ?? 0) & 0x0f) !== 0x08
          ? inflateRawAsync(input, { ...ZLIB_LENIENT, maxOutputLength: limit })
          : inflateAsync(input, { ...ZLIB_LENIENT, maxOutputLength: limit }),
      );
    } else if (coding === "br") {
      decoders.push((input, limit) => brotliAsync(input, { ...BROTLI_LENIENT, maxOutputLength: limit }));
    } else {
      return [];
    }
  }
  return decoders;
}

/** The body's bytes as sent, at most `limit` of them (events, not an async iterator: ~20 % less CPU). */
function readWhole(reply: GatedReply, limit: number, maxBytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    reply.body.on("error", reject);
    reply.body.on("data", (chunk: Buffer) => {
      total += chunk.byteLength;
      if (total > limit) {
        chunks.length = 0;
        discard(reply);
        reject(new BodyTooLargeError(maxBytes));
        return;
      }
      chunks.push(chunk);
    });
    reply.body.on("end", () => resolve(Buffer.concat(chunks, total)));
  });
}

/**
 * `readBoundedBody` for a reply of the gate's `request`: the body read whole and decoded as
 * fetch decodes it (gzip, x-gzip, deflate, br; any other coding leaves it as sent), failing
 * once the decoded bytes would pass `maxBytes`. The coded bytes are bounded too, with room
 * for what coding adds to incompressible data.
 */
export async function readBoundedReply(
  reply: GatedReply,
  method: string,
  maxBytes: number,
): Promise<Uint8Array> {
  const bodiless = method === "HEAD" || NULL_BODY_STATUSES.has(reply.status);
  let decoders: ReturnType<typeof decodersOf>;
  try {
    decoders = bodiless ? [] : decodersOf(reply.headers.get("content-encoding"));
  } catch (error) {
    discard(reply);
    throw error;
  }
  // A HEAD answer's length is the GET's: there is no body to bound (what arrives is still bounded).
  const declared = bodiless ? Number.NaN : Number(reply.headers.get("content-length") ?? Number.NaN);
  const codedLimit = decoders.length === 0 ? maxBytes : maxBytes + Math.ceil(maxBytes / 64) + 1024;
  if (Number.isFinite(declared) && declared > codedLimit) {
    discard(reply);
    throw new BodyTooLargeError(maxBytes);
  }
  let bytes: Buffer = await readWhole(reply, codedLimit, maxBytes);
  if (bytes.length === 0) return bytes;
  for (const decode of decoders) {
    try {
      bytes = await decode(bytes, maxBytes);
    } catch (error) {
      // Past maxOutputLength: zlib's RangeError (ERR_BUFFER_TOO_LARGE).
      if (error instanceof RangeError) throw new BodyTooLargeError(maxBytes);
      throw error;
    }
  }
  if (bytes.length > maxBytes) throw new BodyTooLargeError(maxBytes);
  return bytes;
}
