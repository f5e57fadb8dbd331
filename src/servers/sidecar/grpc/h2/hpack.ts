import { decodeHuffman } from "./huffman.ts";

/**
 * HPACK (RFC 7541) for the sidecar's HTTP/2 server: a complete decoder (static and dynamic
 * table, table size updates, Huffman strings, limits) and a minimal encoder that writes
 * "literal without indexing" fields only, so the server keeps no encoder state and its
 * constant header blocks can be encoded once.
 */

export class HpackError extends Error {
  override readonly name = "HpackError";
}

const STATIC_TABLE: ReadonlyArray<readonly [string, string]> = [
  [":authority", ""],
  [":method", "GET"],
  [":method", "POST"],
  [":path", "/"],
  [":path", "/index.html"],
  [":scheme", "http"],
  [":scheme", "https"],
  [":status", "200"],
  [":status", "204"],
  [":status", "206"],
  [":status", "304"],
  [":status", "400"],
  [":status", "404"],
  [":status", "500"],
  ["accept-charset", ""],
  ["accept-encoding", "gzip, deflate"],
  ["accept-language", ""],
  ["accept-ranges", ""],
  ["accept", ""],
  ["access-control-allow-origin", ""],
  ["age", ""],
  ["allow", ""],
  ["authorization", ""],
  ["cache-control", ""],
  ["content-disposition", ""],
  ["content-encoding", ""],
  ["content-language", ""],
  ["content-length", ""],
  ["content-location", ""],
  ["content-range", ""],
  ["content-type", ""],
  ["cookie", ""],
  ["date", ""],
  ["etag", ""],
  ["expect", ""],
  ["expires", ""],
  ["from", ""],
  ["host", ""],
  ["if-match", ""],
  ["if-modified-since", ""],
  ["if-none-match", ""],
  ["if-range", ""],
  ["if-unmodified-since", ""],
  ["last-modified", ""],
  ["link", ""],
  ["location", ""],
  ["max-forwards", ""],
  ["proxy-authenticate", ""],
  ["proxy-authorization", ""],
  ["range", ""],
  ["referer", ""],
  ["refresh", ""],
  ["retry-after", ""],
  ["server", ""],
  ["set-cookie", ""],
  ["strict-transport-security", ""],
  ["transfer-encoding", ""],
  ["user-agent", ""],
  ["vary", ""],
  ["via", ""],
  ["www-authenticate", ""],
];

/** Per-entry overhead counted in table and header-list sizes (§4.1). */
const ENTRY_OVERHEAD = 32;
/** The largest integer accepted (§5.1 leaves the bound to the decoder): far above any limit here. */
const MAX_INTEGER = 2 ** 28;

export interface HpackDecoderOptions {
  /** SETTINGS_HEADER_TABLE_SIZE this side announced: the most the peer may make the table. */
  readonly maxTableSize: number;
  /** SETTINGS_MAX_HEADER_LIST_SIZE this side announced: decoded size limit of one block. */
  readonly maxHeaderListSize: number;
}

/** Decodes header blocks in order, keeping the dynamic table in step with the peer's encoder. */
export class HpackDecoder {
  readonly #maxTableSize: number;
  readonly #maxHeaderListSize: number;
  /** Oldest first; the newest is dynamic index 1 (table index 62). */
  readonly #table: Array<readonly [string, string]> = [];
  #tableSize = 0;
  #capacity: number;
  #at = 0;
  #block: Buffer = Buffer.alloc(0);

  constructor(options: HpackDecoderOptions) {
    this.#maxTableSize = options.maxTableSize;
    this.#maxHeaderListSize = options.maxHeaderListSize;
    this.#capacity = options.maxTableSize;
  }

  /** Calls `field` for each header in order; throws HpackError (a COMPRESSION_ERROR) if malformed. */
  decode(block: Uint8Array, field: (name: string, value: string) => void): void {
    // One Buffer view per block, so plain strings are sliced without a view per string.
    this.#block = Buffer.isBuffer(block)
      ? block
      : Buffer.from(block.buffer, block.byteOffset, block.byteLength);
    this.#at = 0;
    let listSize = 0;
    let fieldsSeen = false;
    while (this.#at < block.length) {
      const first = block[this.#at] ?? 0;
      let name: string;
      let value: string;
      if (first & 0x80) {
        [name, value] = this.#entry(this.#integer(7));
      } else if ((first & 0xe0) === 0x20) {
        // A table size update is allowed only before the block's first field (§4.2).
        if (fieldsSeen) throw new HpackError("table size update after a header field");
        const size = this.#integer(5);
        if (size > this.#maxTableSize) throw new HpackError("table size update above the announced limit");
        this.#capacity = size;
        this.#evict(0);
        continue;
      } else {
        const indexing = (first & 0xc0) === 0x40;
        const index = this.#integer(indexing ? 6 : 4);
        name = index === 0 ? this.#string() : this.#entry(index)[0];
        value = this.#string();
        if (indexing) this.#insert(name, value);
      }
      fieldsSeen = true;
      listSize += name.length + value.length + ENTRY_OVERHEAD;
      if (listSize > this.#maxHeaderListSize) throw new HpackError("header list too large");
      field(name, value);
    }
    this.#block = Buffer.alloc(0);
  }

  #integer(prefixBits: number): number {
    const block = this.#block;
    const limit = (1 << prefixBits) - 1;
    let value = (block[this.#at++] ?? 0) & limit;
    if (value < limit) return value;
    // Four continuation bytes reach 2^28; more (even zero-valued ones) are refused.
    for (let factor = 1; factor <= MAX_INTEGER; factor *= 128) {
      if (this.#at >= block.length) throw new HpackError("truncated integer");
      const byte = block[this.#at++] ?? 0;
      value += (byte & 0x7f) * factor;
      if (value > MAX_INTEGER) throw new HpackError("integer too large");
      if ((byte & 0x80) === 0) return value;
    }
    throw new HpackError("integer too long");
  }

  #string(): string {
    const block = this.#block;
    if (this.#at >= block.length) throw new HpackError("truncated string");
    const huffman = ((block[this.#at] ?? 0) & 0x80) !== 0;
    const length = this.#integer(7);
    const start = this.#at;
    const end = start + length;
    if (end > block.length) throw new HpackError("truncated string");
    this.#at = end;
    if (!huffman) return block.toString("latin1", start, end);
    const decoded = decodeHuffman(block, start, end);
    if (decoded === undefined) throw new HpackError("bad Huffman string");
    return decoded;
  }

  #entry(index: number): readonly [string, string] {
    if (index === 0) throw new HpackError("index 0");
    const fromStatic = STATIC_TABLE[index - 1];
    if (fromStatic !== undefined) return fromStatic;
    const entry = this.#table[this.#table.length - (index - STATIC_TABLE.length)];
    if (entry === undefined) throw new HpackError("index beyond the table");
    return entry;
  }

  #insert(name: string, value: string): void {
    const size = name.length + value.length + ENTRY_OVERHEAD;
    // An entry larger than the table empties it and is not added (§4.4).
    this.#evict(size);
    if (size > this.#capacity) return;
    this.#table.push([name, value]);
    this.#tableSize += size;
  }

  /** Evicts oldest entries until `room` more bytes fit. */
  #evict(room: number): void {
    let drop = 0;
    while (this.#tableSize + room > this.#capacity && drop < this.#table.length) {
      const [name, value] = this.#table[drop] ?? ["", ""];
      this.#tableSize -= name.length + value.length + ENTRY_OVERHEAD;
      drop++;
    }
    if (drop > 0) this.#table.splice(0, drop);
  }
}

function integerBytes(value: number, prefixBits: number, flags: number): number[] {
  const limit = (1 << prefixBits) - 1;
  if (value < limit) return [flags | value];
  const bytes = [flags | limit];
  let rest = value - limit;
  while (rest >= 128) {
    bytes.push((rest % 128) | 0x80);
    rest = Math.floor(rest / 128);
  }
  bytes.push(rest);
  return bytes;
}

/**
 * A header block of "literal without indexing, new name" fields (§6.2.2), strings as plain
 * Latin-1 octets. Values must already be valid header octets (no CR, LF or NUL).
 *
 * Every block starts with a dynamic table size update to 0 (§6.3): this encoder keeps no table,
 * and a peer that lowers SETTINGS_HEADER_TABLE_SIZE requires such an update at the start of
 * the next block (§4.2) — one byte always sent is simpler than tracking when it is owed.
 */
export function encodeHeaderBlock(fields: ReadonlyArray<readonly [string, string]>): Buffer {
  const parts: Buffer[] = [Buffer.from([0x20])];
  for (const [name, value] of fields) {
    parts.push(Buffer.from(integerBytes(0, 4, 0x00)));
    for (const text of [name, value]) {
      const bytes = Buffer.from(text, "latin1");
      parts.push(Buffer.from(integerBytes(bytes.length, 7, 0x00)), bytes);
    }
  }
  return Buffer.concat(parts);
}
