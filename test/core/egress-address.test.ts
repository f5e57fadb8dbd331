import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  type AddressClass,
  allowEntryMatches,
  allowEntryNames,
  classifyAddress,
  classifyHostName,
  formatIpAddress,
  type IpAddress,
  isAllowable,
  parseEgressAllowEntry,
  parseIpAddress,
} from "../../src/core/egress-address.ts";

function classOf(text: string): AddressClass | undefined {
  const parsed = parseIpAddress(text);
  return parsed === undefined ? undefined : classifyAddress(parsed);
}

// ---------------------------------------------------------------------------------------
// Textual forms an attacker can choose for one IPv4 address.

type Quad = [number, number, number, number];
const toInt = ([a, b, c, d]: Quad): number => ((a * 256 + b) * 256 + c) * 256 + d;
const hex = (n: number, width = 1): string => n.toString(16).padStart(width, "0");

const ipv4Forms = (q: Quad): string[] => {
  const [a, b, c, d] = q;
  const n = toInt(q);
  return [
    `${a}.${b}.${c}.${d}`,
    `${a}.${b}.${c}.${d}.`,
    String(n),
    `0x${hex(n)}`,
    `0X${hex(n, 8).toUpperCase()}`,
    `0${n.toString(8)}`,
    `${a}.${b * 65536 + c * 256 + d}`,
    `${a}.${b}.${c * 256 + d}`,
    `0x${hex(a)}.0x${hex(b)}.0x${hex(c)}.0x${hex(d)}`,
    `0${a.toString(8)}.0${b.toString(8)}.0${c.toString(8)}.0${d.toString(8)}`,
    `::ffff:${a}.${b}.${c}.${d}`,
    `[::ffff:${a}.${b}.${c}.${d}]`,
    `::ffff:${hex(a * 256 + b)}:${hex(c * 256 + d)}`,
    `0:0:0:0:0:FFFF:${hex(a * 256 + b, 4).toUpperCase()}:${hex(c * 256 + d, 4)}`,
    `0000:0000:0000:0000:0000:ffff:${a}.${b}.${c}.${d}`,
    `::ffff:0:${a}.${b}.${c}.${d}`,
    `64:ff9b::${a}.${b}.${c}.${d}`,
    `64:ff9b::${hex(a * 256 + b)}:${hex(c * 256 + d)}`,
    `2002:${hex(a * 256 + b)}:${hex(c * 256 + d)}::1`,
    `::ffff:${a}.${b}.${c}.${d}%eth0`,
  ];
};

/** A random address inside `base/bits` (IPv4). */
const inIpv4Range = (base: Quad, bits: number) =>
  fc.integer({ min: 0, max: 2 ** (32 - bits) - 1 }).map((offset): Quad => {
    const n = toInt(base) + offset;
    return [(n >>> 24) & 255, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
  });

const REFUSED_IPV4: ReadonlyArray<{ base: Quad; bits: number; kind: AddressClass }> = [
  { base: [127, 0, 0, 0], bits: 8, kind: "loopback" },
  { base: [0, 0, 0, 0], bits: 8, kind: "unspecified" },
  { base: [10, 0, 0, 0], bits: 8, kind: "private" },
  { base: [172, 16, 0, 0], bits: 12, kind: "private" },
  { base: [192, 168, 0, 0], bits: 16, kind: "private" },
  { base: [100, 64, 0, 0], bits: 10, kind: "shared" },
  { base: [224, 0, 0, 0], bits: 4, kind: "multicast" },
  { base: [240, 0, 0, 0], bits: 5, kind: "reserved" },
];

/** Every textual form of an IPv6 address: compressed, expanded, padded, upper case, bracketed, zoned. */
const ipv6Forms = (words: readonly number[]): string[] => {
  const plain = words.map((w) => hex(w));
  const padded = words.map((w) => hex(w, 4));
  const forms = [plain.join(":"), padded.join(":"), padded.join(":").toUpperCase(), `[${plain.join(":")}]`];
  // Compress the longest run of zero words (and any other run) with "::".
  for (let start = 0; start < 8; start++) {
    for (let end = start + 1; end <= 8; end++) {
      if (words.slice(start, end).every((w) => w === 0)) {
        forms.push(`${plain.slice(0, start).join(":")}::${plain.slice(end).join(":")}`);
      }
    }
  }
  forms.push(`${plain.join(":")}%25`);
  return forms;
};

const inIpv6Range = (prefix: readonly number[], bits: number) =>
  fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 8, maxLength: 8 }).map((random) =>
    random.map((word, i) => {
      const fixed = Math.max(0, Math.min(16, bits - i * 16));
      const mask = fixed === 0 ? 0 : (0xffff << (16 - fixed)) & 0xffff;
      return ((prefix[i] ?? 0) & mask) | (word & ~mask & 0xffff);
    }),
  );

const REFUSED_IPV6: ReadonlyArray<{ prefix: number[]; bits: number; kind: AddressClass }> = [
  { prefix: [0xfe80], bits: 10, kind: "link_local" },
  { prefix: [0xfc00], bits: 7, kind: "unique_local" },
  { prefix: [0xff00], bits: 8, kind: "multicast" },
  { prefix: [0x2001, 0x0db8], bits: 32, kind: "reserved" },
];

describe("egress address classifier", () => {
  it("classifies the named addresses of every rule", () => {
    const cases: Array<[string, AddressClass]> = [
      ["127.0.0.1", "loopback"],
      ["127.255.255.254", "loopback"],
      ["::1", "loopback"],
      ["0.0.0.0", "unspecified"],
      ["::", "unspecified"],
      ["169.254.0.1", "link_local"],
      ["fe80::1", "link_local"],
      ["169.254.169.254", "metadata"],
      ["169.254.170.2", "metadata"],
      ["100.100.100.200", "metadata"],
      ["fd00:ec2::254", "metadata"],
      ["::ffff:169.254.169.254", "metadata"],
      ["10.1.2.3", "private"],
      ["172.31.255.255", "private"],
      ["192.168.1.1", "private"],
      ["100.64.0.1", "shared"],
      ["fd12:3456::1", "unique_local"],
      ["224.0.0.1", "multicast"],
      ["ff02::1", "multicast"],
      ["255.255.255.255", "broadcast"],
      ["240.0.0.1", "reserved"],
      ["192.0.2.1", "reserved"],
      ["2001:db8::1", "reserved"],
      ["::ffff:127.0.0.1", "loopback"],
      ["::127.0.0.1", "loopback"],
      ["[::ffff:7f00:1]", "loopback"],
      ["0x7f.1", "loopback"],
      ["2130706433", "loopback"],
      ["0177.0.0.01", "loopback"],
      ["8.8.8.8", "public"],
      ["93.184.216.34", "public"],
      ["172.32.0.1", "public"],
      ["2606:4700:4700::1111", "public"],
      ["::ffff:8.8.8.8", "public"],
    ];
    for (const [text, kind] of cases) assert.equal(classOf(text), kind, text);
  });

  it("refuses metadata host names without resolving them", () => {
    for (const name of [
      "metadata.google.internal",
      "METADATA.GOOGLE.INTERNAL.",
      "metadata",
      "metadata.goog",
    ]) {
      assert.equal(classifyHostName(name), "metadata", name);
    }
    assert.equal(classifyHostName("api.example.com"), undefined);
  });

  it("does not take names or malformed text for addresses", () => {
    for (const text of [
      "example.com",
      "1.2.3.4.5",
      "256.1.1.1",
      "1.2.3.256",
      "0x1g",
      "::1::",
      "1:2:3:4:5:6:7:8:9",
      "",
      "[::1",
      "12345::",
      "::ffff:1.2.3",
    ]) {
      assert.equal(parseIpAddress(text), undefined, text);
    }
  });

  it("property: any IPv4 address of a refused range, in any textual form, is refused with its class", () => {
    fc.assert(
      fc.property(
        fc
          .constantFrom(...REFUSED_IPV4)
          .chain((range) => inIpv4Range(range.base, range.bits).map((q) => ({ q, kind: range.kind }))),
        ({ q, kind }) => {
          for (const form of ipv4Forms(q)) {
            const got = classOf(form);
            // 0.0.0.0/8 behind NAT64 or 6to4 is still "this network".
            assert.equal(got, kind, `${form} (${q.join(".")})`);
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it("property: link-local and metadata IPv4 addresses stay refused in every form", () => {
    fc.assert(
      fc.property(inIpv4Range([169, 254, 0, 0], 16), (q) => {
        const expected = classOf(q.join("."));
        assert.ok(expected === "link_local" || expected === "metadata");
        for (const form of ipv4Forms(q)) assert.equal(classOf(form), expected, form);
      }),
      { numRuns: 200 },
    );
  });

  it("property: any IPv6 address of a refused range, in any textual form, is refused with its class", () => {
    fc.assert(
      fc.property(
        fc
          .constantFrom(...REFUSED_IPV6)
          .chain((range) =>
            inIpv6Range(range.prefix, range.bits).map((words) => ({ words, kind: range.kind })),
          ),
        ({ words, kind }) => {
          for (const form of ipv6Forms(words)) {
            const got = classOf(form);
            // fd00:ec2::254 sits inside fc00::/7 and is the stricter metadata class.
            assert.ok(got === kind || (kind === "unique_local" && got === "metadata"), `${form}: ${got}`);
            assert.ok(got !== "public" && got !== undefined);
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it("property: parsing and formatting agree on every IPv4 and IPv6 address", () => {
    fc.assert(
      fc.property(fc.oneof(fc.ipV4(), fc.ipV6()), (text) => {
        const parsed = parseIpAddress(text);
        assert.ok(parsed !== undefined, text);
        const again = parseIpAddress(formatIpAddress(parsed));
        assert.deepEqual(again?.bytes, parsed.bytes);
        // Node's own parser agrees that this is an address of the same family.
        assert.equal(parsed.version, text.includes(":") ? 6 : 4);
      }),
      { numRuns: 500 },
    );
  });

  it("only the private-like classes can be opened by an allow-list entry", () => {
    for (const kind of ["loopback", "link_local", "private", "shared", "unique_local", "reserved"] as const) {
      assert.equal(isAllowable(kind), true, kind);
    }
    for (const kind of ["metadata", "unspecified", "multicast", "broadcast", "public"] as const) {
      assert.equal(isAllowable(kind), false, kind);
    }
  });
});

describe("egress allow-list entries", () => {
  it("parses CIDRs and address:port entries, and matches mapped IPv6 forms", () => {
    const cidr = parseEgressAllowEntry("10.0.0.0/8");
    const endpoint = parseEgressAllowEntry("127.0.0.1:18080");
    const v6 = parseEgressAllowEntry("[::1]:9000");
    assert.ok(cidr !== undefined && endpoint !== undefined && v6 !== undefined);
    const at = (text: string) => {
      const parsed = parseIpAddress(text);
      assert.ok(parsed !== undefined);
      return parsed;
    };
    assert.equal(allowEntryMatches(cidr, at("10.200.3.4"), 443), true);
    assert.equal(allowEntryMatches(cidr, at("::ffff:10.200.3.4"), 443), true);
    assert.equal(allowEntryMatches(cidr, at("11.0.0.1"), 443), false);
    assert.equal(allowEntryMatches(endpoint, at("127.0.0.1"), 18080), true);
    assert.equal(allowEntryMatches(endpoint, at("::ffff:127.0.0.1"), 18080), true);
    assert.equal(allowEntryMatches(endpoint, at("127.0.0.1"), 8080), false);
    assert.equal(allowEntryMatches(endpoint, at("127.0.0.2"), 18080), false);
    assert.equal(allowEntryMatches(v6, at("::1"), 9000), true);
  });

  it("parses host name entries, with or without a port, normalized; they match no address", () => {
    const named = parseEgressAllowEntry("Orders.Shop.svc.cluster.local.:8080");
    assert.deepEqual(named, {
      kind: "name",
      name: "orders.shop.svc.cluster.local",
      port: 8080,
      text: "Orders.Shop.svc.cluster.local.:8080",
    });
    assert.deepEqual(parseEgressAllowEntry("localhost"), {
      kind: "name",
      name: "localhost",
      text: "localhost",
    });
    assert.ok(named !== undefined);
    assert.equal(allowEntryNames(named, "orders.shop.svc.cluster.local", 8080), true);
    assert.equal(allowEntryNames(named, "ORDERS.shop.svc.cluster.local.", 8080), true);
    assert.equal(allowEntryNames(named, "orders.shop.svc.cluster.local", 8081), false);
    assert.equal(allowEntryNames(named, "evil-orders.shop.svc.cluster.local", 8080), false);
    assert.equal(allowEntryNames(named, "orders.shop.svc.cluster.local.evil.test", 8080), false);
    assert.equal(allowEntryMatches(named, parseIpAddress("127.0.0.1") as IpAddress, 8080), false);
  });

  it("refuses metadata names, wildcards, host bits below the prefix, odd spellings and bad ports", () => {
    for (const text of [
      "metadata.google.internal",
      "metadata:80",
      "*.shop.svc",
      "orders.internal:0",
      "orders.internal:70000",
      "orders..internal",
      "-orders.internal",
      "orders.123",
      "http://orders.internal",
      `${"a".repeat(64)}.internal`,
      "10.0.0.1/8",
      "10.0.0.0/33",
      "0x7f.1:80",
      "127.1:80",
      "127.0.0.1:0",
      "127.0.0.1:70000",
      "*",
      "[::1]",
      "::1]:80",
    ]) {
      assert.equal(parseEgressAllowEntry(text), undefined, text);
    }
  });
});
