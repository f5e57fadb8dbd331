import type { RawCheckRequest } from "./check-input.ts";

/**
 * Decodes the few CheckRequest fields a decision reads (check-input.ts, RawCheckRequest)
 * straight from the protobuf bytes, skipping everything else. Every Check arrives through
 * here: the loader's decoder built the whole message, then a second object tree with every
 * default filled in, and that cost more per Check than deciding.
 *
 * Reads as protobufjs does for every well-formed message (test/servers/sidecar/grpc/
 * check-request-wire.test.ts compares the two): strings as UTF-8 with replacement, a
 * repeated singular field's last occurrence wins — a repeated message field replaces the
 * earlier one, it is not merged — and map entries are own keys of an object, in its order
 * (integer-like keys first), a `__proto__` key included.
 * Stricter than protobufjs on malformed input: a truncated field, a wire type that does not
 * fit the field, a group or an unknown wire type throws, and the server denies the request.
 */

class MalformedCheckRequest extends Error {}

const VARINT = 0;
const FIXED64 = 1;
const LENGTH_DELIMITED = 2;
const FIXED32 = 5;

/** Tags of the fields read: (field number << 3) | LENGTH_DELIMITED. */
const tagOf = (field: number): number => (field << 3) | LENGTH_DELIMITED;

// The message being read and the read position: decoding is synchronous, one at a time.
const EMPTY = Buffer.alloc(0);
let buffer: Buffer = EMPTY;
let position = 0;

/** A varint that fits 32 bits unsigned (tags, lengths). */
function uint32(): number {
  let value = 0;
  for (let shift = 0; shift < 35; shift += 7) {
    const byte = buffer[position++];
    if (byte === undefined) throw new MalformedCheckRequest("truncated varint");
    value += (byte & 0x7f) * 2 ** shift;
    if (byte < 0x80) {
      if (value > 0xffffffff) throw new MalformedCheckRequest("varint too large");
      return value;
    }
  }
  throw new MalformedCheckRequest("varint too long");
}

/** The end offset of the length-delimited field whose length starts here. */
function end(limit: number): number {
  const length = uint32();
  const at = position + length;
  if (at > limit) throw new MalformedCheckRequest("truncated field");
  return at;
}

function string(limit: number): string {
  const at = end(limit);
  const text = buffer.toString("utf8", position, at);
  position = at;
  return text;
}

function bytes(limit: number): Buffer {
  const at = end(limit);
  const value = buffer.subarray(position, at);
  position = at;
  return value;
}

/**
 * Skips a field this decoder does not read. A field it does read (`known`) that comes with
 * another wire type is malformed, as are field number 0, groups and unknown wire types.
 */
function skip(tag: number, limit: number, known: readonly number[]): void {
  const field = tag >>> 3;
  if (field === 0 || known.includes(field)) throw new MalformedCheckRequest("unexpected field");
  switch (tag & 7) {
    case VARINT:
      for (let i = 0; i < 10; i++) {
        const byte = buffer[position++];
        if (byte === undefined) throw new MalformedCheckRequest("truncated varint");
        if (byte < 0x80) return;
      }
      throw new MalformedCheckRequest("varint too long");
    case FIXED64:
      position += 8;
      break;
    case LENGTH_DELIMITED:
      position = end(limit);
      break;
    case FIXED32:
      position += 4;
      break;
    default:
      throw new MalformedCheckRequest("unread wire type");
  }
  if (position > limit) throw new MalformedCheckRequest("truncated field");
}

function finish(limit: number): void {
  if (position !== limit) throw new MalformedCheckRequest("truncated message");
}

/**
 * A map<string, string> as decoded entries: a key seen again keeps its place and takes the
 * later value. Found by a scan while short (Envoy sends tens of headers), through an index
 * past that, so a message of many entries costs linear time.
 */
class StringMap {
  readonly entries: Array<[string, string]> = [];
  #index: Map<string, [string, string]> | undefined;

  set(key: string, value: string): void {
    let entry: [string, string] | undefined;
    if (this.#index !== undefined) entry = this.#index.get(key);
    else for (const candidate of this.entries) if (candidate[0] === key) entry = candidate;
    if (entry !== undefined) {
      entry[1] = value;
      return;
    }
    entry = [key, value];
    this.entries.push(entry);
    this.#index?.set(key, entry);
    if (this.#index === undefined && this.entries.length > 32)
      this.#index = new Map(this.entries.map((e) => [e[0], e]));
  }

  /** In the order of an object's own keys (integer-like keys first), as protobufjs' map object has them. */
  ordered(): Array<[string, string]> {
    return this.entries.some(([key]) => INTEGER_KEY.test(key))
      ? Object.entries(Object.fromEntries(this.entries))
      : this.entries;
  }
}

/** An array index as a property key: such keys come first in an object's key order. */
const INTEGER_KEY = /^(?:0|[1-9][0-9]{0,9})$/;

const MAP_ENTRY = [1, 2];

/** A map<string, string> entry, set on `target`. */
function mapEntry(limit: number, target: StringMap): void {
  const at = end(limit);
  let key = "";
  let value = "";
  while (position < at) {
    const tag = uint32();
    if (tag === tagOf(1)) key = string(at);
    else if (tag === tagOf(2)) value = string(at);
    else skip(tag, at, MAP_ENTRY);
  }
  finish(at);
  target.set(key, value);
}

interface HeaderValue {
  key: string;
  value: string;
  rawValue: Buffer | undefined;
}

const HEADER_VALUE = [1, 2, 3];

function headerValue(limit: number): HeaderValue {
  const at = end(limit);
  const header: HeaderValue = { key: "", value: "", rawValue: undefined };
  while (position < at) {
    const tag = uint32();
    if (tag === tagOf(1)) header.key = string(at);
    else if (tag === tagOf(2)) header.value = string(at);
    else if (tag === tagOf(3)) header.rawValue = bytes(at);
    else skip(tag, at, HEADER_VALUE);
  }
  finish(at);
  return header;
}

const HEADER_MAP = [1];

function headerMap(limit: number): HeaderValue[] {
  const at = end(limit);
  const headers: HeaderValue[] = [];
  while (position < at) {
    const tag = uint32();
    if (tag === tagOf(1)) headers.push(headerValue(at));
    else skip(tag, at, HEADER_MAP);
  }
  finish(at);
  return headers;
}

interface HttpFields {
  id: string;
  method: string;
  path: string;
  host: string;
  scheme: string;
  headers: StringMap;
  headerMap: HeaderValue[];
  body: string;
  rawBody: Buffer | undefined;
}

const HTTP_REQUEST = [1, 2, 3, 4, 5, 6, 11, 12, 13];

function httpRequest(limit: number): HttpFields {
  const at = end(limit);
  const http: HttpFields = {
    id: "",
    method: "",
    path: "",
    host: "",
    scheme: "",
    headers: new StringMap(),
    headerMap: [],
    body: "",
    rawBody: undefined,
  };
  while (position < at) {
    const tag = uint32();
    switch (tag) {
      case tagOf(1):
        http.id = string(at);
        break;
      case tagOf(2):
        http.method = string(at);
        break;
      case tagOf(3):
        mapEntry(at, http.headers);
        break;
      case tagOf(4):
        http.path = string(at);
        break;
      case tagOf(5):
        http.host = string(at);
        break;
      case tagOf(6):
        http.scheme = string(at);
        break;
      case tagOf(11):
        http.body = string(at);
        break;
      case tagOf(12):
        http.rawBody = bytes(at);
        break;
      case tagOf(13):
        http.headerMap = headerMap(at);
        break;
      default:
        skip(tag, at, HTTP_REQUEST);
    }
  }
  finish(at);
  return http;
}

const REQUEST = [2];

/** AttributeContext.Request: only `http`. */
function request(limit: number): HttpFields | undefined {
  const at = end(limit);
  let http: HttpFields | undefined;
  while (position < at) {
    const tag = uint32();
    if (tag === tagOf(2)) http = httpRequest(at);
    else skip(tag, at, REQUEST);
  }
  finish(at);
  return http;
}

const PEER = [4];

/** AttributeContext.Peer: only `principal`. */
function peerPrincipal(limit: number): string {
  const at = end(limit);
  let principal = "";
  while (position < at) {
    const tag = uint32();
    if (tag === tagOf(4)) principal = string(at);
    else skip(tag, at, PEER);
  }
  finish(at);
  return principal;
}

interface AttributeFields {
  principal: string;
  http: HttpFields | undefined;
  contextExtensions: StringMap;
}

const ATTRIBUTE_CONTEXT = [1, 4, 10];

function attributeContext(limit: number): AttributeFields {
  const at = end(limit);
  const attributes: AttributeFields = {
    principal: "",
    http: undefined,
    contextExtensions: new StringMap(),
  };
  while (position < at) {
    const tag = uint32();
    if (tag === tagOf(1)) attributes.principal = peerPrincipal(at);
    else if (tag === tagOf(4)) attributes.http = request(at);
    else if (tag === tagOf(10)) mapEntry(at, attributes.contextExtensions);
    else skip(tag, at, ATTRIBUTE_CONTEXT);
  }
  finish(at);
  return attributes;
}

const CHECK_REQUEST = [1];
const lenientUtf8 = new TextDecoder("utf-8", { fatal: false });

/** The RawCheckRequest of a CheckRequest's bytes; throws on malformed bytes. */
export function decodeCheckRequest(message: Buffer): RawCheckRequest {
  buffer = message;
  position = 0;
  let attributes: AttributeFields | undefined;
  try {
    while (position < message.length) {
      const tag = uint32();
      if (tag === tagOf(1)) attributes = attributeContext(message.length);
      else skip(tag, message.length, CHECK_REQUEST);
    }
    finish(message.length);
  } finally {
    // The request's bytes are not kept past its decoding.
    buffer = EMPTY;
  }
  const http = attributes?.http;
  return {
    id: http?.id ?? "",
    method: http?.method ?? "",
    path: http?.path ?? "",
    host: http?.host ?? "",
    scheme: http?.scheme ?? "",
    headers: http?.headers.ordered() ?? [],
    headerMap: (http?.headerMap ?? []).map(({ key, value, rawValue }) => [
      key,
      value || (rawValue === undefined ? "" : lenientUtf8.decode(rawValue)),
    ]),
    contextExtensions: attributes?.contextExtensions.ordered() ?? [],
    principal: attributes?.principal ?? "",
    body: http?.body ?? "",
    ...(http?.rawBody === undefined ? {} : { rawBody: http.rawBody }),
  };
}
