/**
 * A FIFO of JSON texts kept as UTF-8 bytes in one growable Buffer, outside the JS heap.
 *
 * Decision records wait here for up to the shipper's flush interval; at thousands of
 * decisions per second, records held as strings or objects would outlive several scavenges,
 * be promoted to the old generation, and be swept by full collections (milliseconds each, on
 * the request path). Bytes in a Buffer's backing store are never scanned or moved by the
 * collector; the only heap values per record are a number in `ends`.
 */
export interface RecordQueue {
  readonly length: number;
  push(json: string): void;
  /** How many of the first `count` records fit in a JSON array of `maxBytes` (at least one). */
  countWithin(count: number, maxBytes: number): number;
  /** The first `count` records as the bytes of a JSON array, without removing them. */
  peekArray(count: number): Buffer;
  /** Removes the first `count` records. */
  drop(count: number): void;
}

const INITIAL_BYTES = 64 * 1024;
const OPEN = "[".charCodeAt(0);
const COMMA = ",".charCodeAt(0);
const CLOSE = "]".charCodeAt(0);

export function createRecordQueue(): RecordQueue {
  let bytes = Buffer.allocUnsafe(INITIAL_BYTES);
  /** Offset of the first queued record's first byte. */
  let start = 0;
  /** End offset (exclusive) of each queued record, oldest first, from `first` on. */
  let ends: number[] = [];
  let first = 0;

  const used = (): number => ends.at(-1) ?? start;

  /** Makes room for `needed` more bytes: moves the queue to the front, grows when still short. */
  const reserve = (needed: number): void => {
    if (used() + needed <= bytes.length) return;
    const live = used() - start;
    const size = Math.max(bytes.length, 2 ** Math.ceil(Math.log2(live + needed)));
    const target = size === bytes.length ? bytes : Buffer.allocUnsafe(size);
    bytes.copy(target, 0, start, start + live);
    ends = ends.slice(first).map((end) => end - start);
    first = 0;
    start = 0;
    bytes = target;
  };

  return {
    get length() {
      return ends.length - first;
    },
    push(json) {
      const length = Buffer.byteLength(json);
      reserve(length);
      const at = used();
      bytes.write(json, at, length, "utf8");
      ends.push(at + length);
    },
    countWithin(count, maxBytes) {
      const n = Math.min(count, ends.length - first);
      let from = start;
      let size = 2;
      for (let i = 0; i < n; i++) {
        const end = ends[first + i] ?? from;
        size += end - from + (i > 0 ? 1 : 0);
        if (size > maxBytes && i > 0) return i;
        from = end;
      }
      return n;
    },
    peekArray(count) {
      const n = Math.min(count, ends.length - first);
      let size = 2 + Math.max(0, n - 1);
      let from = start;
      for (let i = 0; i < n; i++) {
        const end = ends[first + i] ?? from;
        size += end - from;
        from = end;
      }
      const out = Buffer.allocUnsafe(size);
      let offset = 0;
      out[offset++] = OPEN;
      from = start;
      for (let i = 0; i < n; i++) {
        const end = ends[first + i] ?? from;
        if (i > 0) out[offset++] = COMMA;
        offset += bytes.copy(out, offset, from, end);
        from = end;
      }
      out[offset] = CLOSE;
      return out;
    },
    drop(count) {
      const n = Math.min(count, ends.length - first);
      if (n === 0) return;
      start = ends[first + n - 1] ?? start;
      first += n;
      if (first === ends.length) {
        ends = [];
        first = 0;
        start = 0;
        // After an outage's backlog, give the memory back.
        if (bytes.length > INITIAL_BYTES * 16) bytes = Buffer.allocUnsafe(INITIAL_BYTES);
      } else if (first > 4096) {
        // Forget the dropped ends now and then (the bytes move on the next reserve()).
        ends = ends.slice(first);
        first = 0;
      }
    },
  };
}
