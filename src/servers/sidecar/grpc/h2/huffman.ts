/**
 * HPACK's static Huffman code (RFC 7541 Appendix B), decoding only: the sidecar reads what
 * Envoy and gRPC clients send, and writes its own few headers as plain literals.
 *
 * The code is canonical (codes of one length are consecutive, in symbol order, and each length
 * continues from the last code of the one before), so the table is kept as its code lengths and
 * the codes are derived from them. Decoding walks a nibble-driven state machine built once at
 * load: 4 bits per step, at most one symbol per step (the shortest code is 5 bits).
 */

/** Code length in bits of symbols 0..255 and of EOS (256). */
const CODE_LENGTHS: readonly number[] = [
  // 0–31
  13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28,
  28, 28, 28, 28, 28,
  // 32–63: ' ' … '?'
  6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
  // 64–95: '@' … '_'
  13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
  // 96–127: '`' … DEL
  15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
  // 128–159
  20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22,
  23, 22, 23, 23, 24,
  // 160–191
  22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22,
  22, 23, 22, 22, 23,
  // 192–223
  26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26,
  26, 28, 27, 27, 27,
  // 224–255
  20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27,
  27, 27, 27, 27, 26,
  // EOS
  30,
];
const EOS = 256;

/** Each symbol's code (right-aligned) and length, derived canonically from CODE_LENGTHS. */
export function huffmanCodes(): ReadonlyArray<{ readonly code: number; readonly bits: number }> {
  const order = CODE_LENGTHS.map((bits, symbol) => ({ bits, symbol })).sort(
    (a, b) => a.bits - b.bits || a.symbol - b.symbol,
  );
  const codes = new Array<{ code: number; bits: number }>(CODE_LENGTHS.length);
  let code = 0;
  let previousBits = order[0]?.bits ?? 0;
  for (const { bits, symbol } of order) {
    code *= 2 ** (bits - previousBits);
    previousBits = bits;
    codes[symbol] = { code, bits };
    code++;
  }
  return codes;
}

/**
 * The decoder: states are the internal nodes of the code tree (0 = root). For state s and
 * nibble n, TRANSITIONS[s*16+n] packs the next state (bits 0–8), the symbol emitted on the way
 * (bits 9–17, 511 = none) and a failure flag (bit 18: the nibble walked into EOS). ACCEPTING[s]
 * says whether ending in state s is valid padding: fewer than 8 bits, all ones (§5.2).
 */
const NO_SYMBOL = 511;
const FAILED = 1 << 18;
const { transitions: TRANSITIONS, accepting: ACCEPTING } = buildDecoder();

function buildDecoder(): { transitions: Uint32Array; accepting: Uint8Array } {
  // The tree: node 0 is the root; children[node*2+bit] is a node id, or -(symbol+1) for a leaf.
  const children: number[] = [0, 0];
  let nodes = 1;
  huffmanCodes().forEach(({ code, bits }, symbol) => {
    let node = 0;
    for (let i = bits - 1; i >= 0; i--) {
      const bit = Math.floor(code / 2 ** i) & 1;
      const slot = node * 2 + bit;
      if (i === 0) {
        children[slot] = -(symbol + 1);
      } else {
        if ((children[slot] ?? 0) === 0) {
          children[slot] = nodes++;
          children.push(0, 0);
        }
        node = children[slot] ?? 0;
      }
    }
  });
  // A state is accepting when it was reached from the root by 0–7 one-bits only.
  const accepting = new Uint8Array(nodes);
  let onesNode = 0;
  for (let depth = 0; depth < 8; depth++) {
    accepting[onesNode] = 1;
    onesNode = children[onesNode * 2 + 1] ?? 0;
  }
  const transitions = new Uint32Array(nodes * 16);
  for (let state = 0; state < nodes; state++) {
    for (let nibble = 0; nibble < 16; nibble++) {
      let node = state;
      let symbol = NO_SYMBOL;
      let failed = 0;
      for (let i = 3; i >= 0; i--) {
        const next = children[node * 2 + ((nibble >> i) & 1)] ?? 0;
        if (next < 0) {
          const leaf = -next - 1;
          if (leaf === EOS) failed = FAILED;
          else symbol = leaf;
          node = 0;
        } else {
          node = next;
        }
      }
      transitions[state * 16 + nibble] = node | (symbol << 9) | failed;
    }
  }
  return { transitions, accepting };
}

/** Decodes a Huffman-coded string as Latin-1 (header bytes one to one); undefined if malformed. */
export function decodeHuffman(bytes: Uint8Array, start: number, end: number): string | undefined {
  const out = Buffer.allocUnsafe(Math.ceil(((end - start) * 8) / 5));
  let length = 0;
  let state = 0;
  for (let i = start; i < end; i++) {
    const byte = bytes[i] ?? 0;
    for (let shift = 4; shift >= 0; shift -= 4) {
      const entry = TRANSITIONS[state * 16 + ((byte >> shift) & 0xf)] ?? FAILED;
      if ((entry & FAILED) !== 0) return undefined;
      const symbol = (entry >> 9) & 0x1ff;
      if (symbol !== NO_SYMBOL) out[length++] = symbol;
      state = entry & 0x1ff;
    }
  }
  if (ACCEPTING[state] !== 1) return undefined;
  return out.toString("latin1", 0, length);
}
