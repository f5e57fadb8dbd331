/**
 * Pure address rules of the egress policy (docs/security.md, "Egress"): parse an IP address
 * in any textual form a resolver or URL parser accepts, see through the IPv6 forms that embed
 * an IPv4 address, and say which class it belongs to. No I/O: resolution and the platform's
 * own addresses are the egress module's job (src/execute/egress.ts).
 */

export interface IpAddress {
  readonly version: 4 | 6;
  /** 4 bytes for IPv4, 16 for IPv6. */
  readonly bytes: Uint8Array;
}

/**
 * `public`: allowed. The others are refused by default; see `isAllowable` for which ones the
 * platform admin may open with an allow-list entry.
 */
export type AddressClass =
  | "public"
  | "loopback"
  | "unspecified"
  | "link_local"
  | "metadata"
  | "private"
  | "shared"
  | "unique_local"
  | "multicast"
  | "broadcast"
  | "reserved";

/** Human wording of each class, for refusals (never the address itself). */
export const addressClassText: Readonly<Record<AddressClass, string>> = {
  public: "a public address",
  loopback: "a loopback address",
  unspecified: "the unspecified address",
  link_local: "a link-local address",
  metadata: "a cloud metadata address",
  private: "a private-network address",
  shared: "a shared (carrier-grade NAT) address",
  unique_local: "a unique-local IPv6 address",
  multicast: "a multicast address",
  broadcast: "the broadcast address",
  reserved: "a reserved address",
};

/**
 * Classes no allow-list entry opens: a metadata service hands out the platform's cloud
 * credentials, and the others are never a real upstream (0.0.0.0 reaches this host).
 */
const NEVER_ALLOWED: ReadonlySet<AddressClass> = new Set([
  "unspecified",
  "metadata",
  "multicast",
  "broadcast",
]);

export function isAllowable(kind: AddressClass): boolean {
  return kind !== "public" && !NEVER_ALLOWED.has(kind);
}

// ---------------------------------------------------------------------------------------
// Parsing

/** One part of an inet_aton-style IPv4 address: decimal, 0x hex or 0-prefixed octal. */
function ipv4Part(text: string): number | undefined {
  if (/^0[xX][0-9a-fA-F]*$/.test(text)) return text.length === 2 ? 0 : Number.parseInt(text.slice(2), 16);
  if (/^0[0-7]+$/.test(text)) return Number.parseInt(text.slice(1), 8);
  if (/^(0|[1-9][0-9]*)$/.test(text)) return Number(text);
  return undefined;
}

/**
 * IPv4 in the forms inet_aton and the WHATWG URL parser accept: one to four parts, each
 * decimal, hex or octal, the last filling the remaining bytes (`127.1`, `0x7f000001`,
 * `2130706433`, `0177.0.0.1`), and an optional trailing dot.
 */
export function parseIpv4(text: string): IpAddress | undefined {
  const trimmed = text.endsWith(".") ? text.slice(0, -1) : text;
  if (trimmed.length === 0 || trimmed.length > 64) return undefined;
  const parts = trimmed.split(".");
  if (parts.length > 4) return undefined;
  const values: number[] = [];
  for (const part of parts) {
    const value = ipv4Part(part);
    if (value === undefined || !Number.isSafeInteger(value)) return undefined;
    values.push(value);
  }
  const last = values.pop() ?? 0;
  if (values.some((v) => v > 255)) return undefined;
  if (last >= 256 ** (4 - values.length)) return undefined;
  const bytes = new Uint8Array(4);
  values.forEach((v, i) => {
    bytes[i] = v;
  });
  let rest = last;
  for (let i = 3; i >= values.length; i--) {
    bytes[i] = rest % 256;
    rest = Math.floor(rest / 256);
  }
  return { version: 4, bytes };
}

/** Strict dotted-quad decimal (the only IPv4 form allowed inside an IPv6 address). */
function dottedQuad(text: string): Uint8Array | undefined {
  const parts = text.split(".");
  if (parts.length !== 4) return undefined;
  const bytes = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const part = parts[i] ?? "";
    if (!/^[0-9]{1,3}$/.test(part) || Number(part) > 255) return undefined;
    bytes[i] = Number(part);
  }
  return bytes;
}

/** IPv6 text (RFC 4291 §2.2): groups, `::`, a trailing dotted quad, any case, a zone id. */
export function parseIpv6(text: string): IpAddress | undefined {
  let body = text;
  const zone = body.indexOf("%");
  if (zone !== -1) body = body.slice(0, zone);
  if (body.length < 2 || body.length > 64) return undefined;
  const words: number[] = [];
  const halves = body.split("::");
  if (halves.length > 2) return undefined;
  const parseHalf = (half: string, allowQuad: boolean): number[] | undefined => {
    if (half.length === 0) return [];
    const groups = half.split(":");
    const out: number[] = [];
    for (let i = 0; i < groups.length; i++) {
      const group = groups[i] ?? "";
      if (allowQuad && i === groups.length - 1 && group.includes(".")) {
        const quad = dottedQuad(group);
        if (quad === undefined) return undefined;
        out.push(((quad[0] ?? 0) << 8) | (quad[1] ?? 0), ((quad[2] ?? 0) << 8) | (quad[3] ?? 0));
        continue;
      }
      if (!/^[0-9a-fA-F]{1,4}$/.test(group)) return undefined;
      out.push(Number.parseInt(group, 16));
    }
    return out;
  };
  if (halves.length === 2) {
    const head = parseHalf(halves[0] ?? "", false);
    const tail = parseHalf(halves[1] ?? "", true);
    if (head === undefined || tail === undefined || head.length + tail.length > 7) return undefined;
    words.push(...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail);
  } else {
    const all = parseHalf(body, true);
    if (all === undefined || all.length !== 8) return undefined;
    words.push(...all);
  }
  const bytes = new Uint8Array(16);
  words.forEach((word, i) => {
    bytes[i * 2] = word >> 8;
    bytes[i * 2 + 1] = word & 0xff;
  });
  return { version: 6, bytes };
}

/** An IP address in any accepted textual form (brackets allowed around IPv6), else undefined. */
export function parseIpAddress(text: string): IpAddress | undefined {
  if (typeof text !== "string") return undefined;
  const bare = text.startsWith("[") && text.endsWith("]") ? text.slice(1, -1) : text;
  return bare.includes(":") ? parseIpv6(bare) : parseIpv4(bare);
}

export function formatIpAddress(address: IpAddress): string {
  const b = address.bytes;
  if (address.version === 4) return Array.from(b).join(".");
  const words: string[] = [];
  for (let i = 0; i < 16; i += 2) words.push((((b[i] ?? 0) << 8) | (b[i + 1] ?? 0)).toString(16));
  return words.join(":");
}

// ---------------------------------------------------------------------------------------
// Classification

const v4 = (a: number, b: number, c: number, d: number): Uint8Array => Uint8Array.of(a, b, c, d);

function startsWith(bytes: Uint8Array, prefix: Uint8Array, bits: number): boolean {
  for (let i = 0; i < bits; i++) {
    const byte = i >> 3;
    const mask = 0x80 >> (i & 7);
    if (((bytes[byte] ?? 0) & mask) !== ((prefix[byte] ?? 0) & mask)) return false;
  }
  return true;
}

function zeros(bytes: Uint8Array, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (bytes[i] !== 0) return false;
  return true;
}

const hex6 = (text: string): Uint8Array => {
  const parsed = parseIpv6(text);
  if (parsed === undefined) throw new Error(`bad constant ${text}`);
  return parsed.bytes;
};

const NAT64_WELL_KNOWN = hex6("64:ff9b::");
const SIX_TO_FOUR = hex6("2002::");

/**
 * The IPv4 address an IPv6 address stands for, when it is one of the forms a host or a
 * translator turns into an IPv4 connection: IPv4-mapped (::ffff:a.b.c.d), IPv4-translated
 * (::ffff:0:a.b.c.d), IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002::/16).
 * `::` and `::1` are not IPv4-compatible: they are IPv6's own unspecified and loopback.
 */
export function embeddedIpv4(address: IpAddress): IpAddress | undefined {
  if (address.version !== 6) return undefined;
  const b = address.bytes;
  const tail = (from: number): IpAddress => ({ version: 4, bytes: b.slice(from, from + 4) });
  if (zeros(b, 0, 10) && b[10] === 0xff && b[11] === 0xff) return tail(12);
  if (zeros(b, 0, 8) && b[8] === 0xff && b[9] === 0xff && b[10] === 0 && b[11] === 0) return tail(12);
  if (zeros(b, 0, 12) && !zeros(b, 12, 15)) return tail(12);
  if (zeros(b, 0, 12) && (b[15] ?? 0) > 1) return tail(12);
  if (startsWith(b, NAT64_WELL_KNOWN, 96)) return tail(12);
  if (startsWith(b, SIX_TO_FOUR, 16)) return tail(2);
  return undefined;
}

/** IPv4 metadata services: AWS/GCP/Azure/OpenStack, AWS ECS task metadata, Alibaba Cloud. */
const IPV4_METADATA: readonly Uint8Array[] = [
  v4(169, 254, 169, 254),
  v4(169, 254, 170, 2),
  v4(100, 100, 100, 200),
];
/** AWS's IPv6 instance metadata endpoint. */
const IPV6_METADATA: readonly Uint8Array[] = [hex6("fd00:ec2::254")];

const sameBytes = (a: Uint8Array, b: Uint8Array): boolean =>
  a.length === b.length && a.every((byte, i) => byte === b[i]);

const ipv4Int = (b: Uint8Array): number =>
  (((b[0] ?? 0) << 24) | ((b[1] ?? 0) << 16) | ((b[2] ?? 0) << 8) | (b[3] ?? 0)) >>> 0;

/** IPv4 ranges in order (the first match wins), as 32-bit base and mask. */
const IPV4_RANGES: ReadonlyArray<{ base: number; mask: number; kind: AddressClass }> = (
  [
    [[0, 0, 0, 0], 8, "unspecified"], // "this host on this network": reaches this machine
    [[127, 0, 0, 0], 8, "loopback"],
    [[169, 254, 0, 0], 16, "link_local"],
    [[10, 0, 0, 0], 8, "private"],
    [[172, 16, 0, 0], 12, "private"],
    [[192, 168, 0, 0], 16, "private"],
    [[100, 64, 0, 0], 10, "shared"],
    [[255, 255, 255, 255], 32, "broadcast"],
    [[224, 0, 0, 0], 4, "multicast"],
    [[240, 0, 0, 0], 4, "reserved"],
    [[192, 0, 0, 0], 24, "reserved"], // IETF protocol assignments
    [[192, 0, 2, 0], 24, "reserved"], // documentation
    [[198, 51, 100, 0], 24, "reserved"],
    [[203, 0, 113, 0], 24, "reserved"],
    [[198, 18, 0, 0], 15, "reserved"], // benchmarking
    [[192, 88, 99, 0], 24, "reserved"], // 6to4 relay anycast
  ] as const
).map(([quad, bits, kind]) => ({
  base: ipv4Int(Uint8Array.from(quad)),
  mask: (0xffffffff << (32 - bits)) >>> 0,
  kind,
}));

const IPV4_METADATA_INTS: ReadonlySet<number> = new Set(IPV4_METADATA.map(ipv4Int));

function classifyIpv4(b: Uint8Array): AddressClass {
  const n = ipv4Int(b);
  if (IPV4_METADATA_INTS.has(n)) return "metadata";
  for (const range of IPV4_RANGES) if ((n & range.mask) >>> 0 === range.base) return range.kind;
  return "public";
}

/** IPv6 prefixes after the special cases above, in order (parsed once). */
const IPV6_RANGES: ReadonlyArray<{ prefix: Uint8Array; bits: number; kind: AddressClass }> = [
  { prefix: hex6("fe80::"), bits: 10, kind: "link_local" },
  { prefix: hex6("fc00::"), bits: 7, kind: "unique_local" },
  { prefix: hex6("ff00::"), bits: 8, kind: "multicast" },
  { prefix: hex6("fec0::"), bits: 10, kind: "reserved" }, // deprecated site-local
  { prefix: hex6("2001:db8::"), bits: 32, kind: "reserved" }, // documentation
  { prefix: hex6("100::"), bits: 64, kind: "reserved" }, // discard-only
  { prefix: hex6("2001::"), bits: 32, kind: "reserved" }, // Teredo: the client's IPv4 address is obfuscated
  { prefix: hex6("2001:10::"), bits: 28, kind: "reserved" },
  { prefix: hex6("64:ff9b:1::"), bits: 48, kind: "reserved" }, // local-use NAT64: the IPv4 position varies
  { prefix: hex6("::"), bits: 8, kind: "reserved" }, // the rest of ::/8 (mapped and compatible forms are read first)
];

function classifyIpv6(b: Uint8Array): AddressClass {
  if (IPV6_METADATA.some((m) => sameBytes(m, b))) return "metadata";
  if (zeros(b, 0, 16)) return "unspecified";
  if (zeros(b, 0, 15) && b[15] === 1) return "loopback";
  for (const range of IPV6_RANGES) if (startsWith(b, range.prefix, range.bits)) return range.kind;
  return "public";
}

/** The class of an address; IPv6 forms that embed an IPv4 address take the IPv4 address's class. */
export function classifyAddress(address: IpAddress): AddressClass {
  const inner = embeddedIpv4(address);
  if (inner !== undefined) return classifyIpv4(inner.bytes);
  return address.version === 4 ? classifyIpv4(address.bytes) : classifyIpv6(address.bytes);
}

/** The address a connection really reaches: the embedded IPv4 address when there is one. */
export function effectiveAddress(address: IpAddress): IpAddress {
  return embeddedIpv4(address) ?? address;
}

export function sameAddress(a: IpAddress, b: IpAddress): boolean {
  const x = effectiveAddress(a);
  const y = effectiveAddress(b);
  return x.version === y.version && sameBytes(x.bytes, y.bytes);
}

// ---------------------------------------------------------------------------------------
// Names

/**
 * Names of metadata services, refused without being resolved (they resolve only inside the
 * cloud, to the addresses above — or to whatever a hostile resolver says).
 */
const METADATA_NAMES: ReadonlySet<string> = new Set([
  "metadata",
  "metadata.google.internal",
  "metadata.goog",
  "metadata.azure.com",
  "instance-data",
  "instance-data.ec2.internal",
]);

/** A host name as DNS compares it: lower case, without the root's trailing dot. */
export function normalizeHostName(host: string): string {
  const lower = host.toLowerCase();
  return lower.endsWith(".") ? lower.slice(0, -1) : lower;
}

/** The class a host name has by itself (metadata names), before any resolution. */
export function classifyHostName(host: string): "metadata" | undefined {
  return METADATA_NAMES.has(normalizeHostName(host)) ? "metadata" : undefined;
}

// ---------------------------------------------------------------------------------------
// Allow-list entries

/**
 * One entry of the platform admin's egress allow list: a CIDR block (`10.0.0.0/8`,
 * `fd00::/8`; a bare address is a /32 or /128), one address and port (`127.0.0.1:18080`,
 * `[::1]:18080`), or a host name with an optional port (`orders.shop.svc.cluster.local:8080`):
 * a connection to exactly that name may reach the addresses it resolves to at that moment.
 */
export type EgressAllowEntry =
  | { readonly kind: "cidr"; readonly address: IpAddress; readonly prefix: number; readonly text: string }
  | { readonly kind: "endpoint"; readonly address: IpAddress; readonly port: number; readonly text: string }
  | { readonly kind: "name"; readonly name: string; readonly port?: number; readonly text: string };

/** DNS labels; the last starts with a letter, so no spelling of an IPv4 address (`127.1`, `0x7f.1`) is a name. */
const HOST_NAME_ENTRY =
  /^((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?)\.?(?::([0-9]{1,5}))?$/;

function parseNameEntry(text: string): EgressAllowEntry | undefined {
  if (text.length > 260) return undefined;
  const match = HOST_NAME_ENTRY.exec(text.toLowerCase());
  if (match === null) return undefined;
  const name = match[1] ?? "";
  // A metadata name is refused whatever is listed: an entry for one is a mistake, not a wish.
  if (name.length > 253 || classifyHostName(name) !== undefined) return undefined;
  if (match[2] === undefined) return { kind: "name", name, text };
  const port = Number(match[2]);
  if (port < 1 || port > 65535) return undefined;
  return { kind: "name", name, port, text };
}

function canonicalDotted(text: string): boolean {
  // Entries are written canonically: an allow list must not be puzzling to review.
  return dottedQuad(text) !== undefined;
}

/** Parses one entry; undefined when it is none of the accepted forms. */
export function parseEgressAllowEntry(raw: string): EgressAllowEntry | undefined {
  const text = raw.trim();
  return parseAddressEntry(text) ?? parseNameEntry(text);
}

function parseAddressEntry(text: string): EgressAllowEntry | undefined {
  const endpoint = /^(?:\[([0-9A-Fa-f:.]+)\]|([0-9.]+)):([0-9]{1,5})$/.exec(text);
  if (endpoint !== null) {
    const host = endpoint[1] ?? endpoint[2] ?? "";
    const port = Number(endpoint[3]);
    const address =
      endpoint[1] !== undefined ? parseIpv6(host) : canonicalDotted(host) ? parseIpv4(host) : undefined;
    if (address === undefined || port < 1 || port > 65535) return undefined;
    return { kind: "endpoint", address: effectiveAddress(address), port, text };
  }
  const cidr = /^([0-9A-Fa-f:.]+)(?:\/([0-9]{1,3}))?$/.exec(text);
  if (cidr === null) return undefined;
  const host = cidr[1] ?? "";
  const address = host.includes(":") ? parseIpv6(host) : canonicalDotted(host) ? parseIpv4(host) : undefined;
  if (address === undefined) return undefined;
  const max = address.version === 4 ? 32 : 128;
  const prefix = cidr[2] === undefined ? max : Number(cidr[2]);
  if (prefix > max) return undefined;
  // Host bits set below the prefix are a typo more often than not: refused, not masked.
  for (let bit = prefix; bit < max; bit++) {
    if (((address.bytes[bit >> 3] ?? 0) & (0x80 >> (bit & 7))) !== 0) return undefined;
  }
  return { kind: "cidr", address, prefix, text };
}

/** Whether an entry covers a destination (the IPv4 address behind a mapped IPv6 form included). */
export function allowEntryMatches(entry: EgressAllowEntry, address: IpAddress, port: number): boolean {
  if (entry.kind === "name") return false;
  const target = effectiveAddress(address);
  if (entry.kind === "endpoint") return entry.port === port && sameAddress(entry.address, target);
  if (entry.address.version !== target.version) return false;
  return startsWith(target.bytes, entry.address.bytes, entry.prefix);
}

/** Whether a name entry covers a connection to `host` (as requested, before resolution) and `port`. */
export function allowEntryNames(entry: EgressAllowEntry, host: string, port: number): boolean {
  return (
    entry.kind === "name" &&
    entry.name === normalizeHostName(host) &&
    (entry.port === undefined || entry.port === port)
  );
}
