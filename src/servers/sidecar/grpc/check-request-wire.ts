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

class Reader {
  readonly buffer: Buffer;
  position: number;

  constructor(buffer: Buffer, position: number) {
    this.buffer = buffer;
    this.position = position;
  }

  /** A varint that fits 32 bits unsigned (tags, lengths). */
  uint32(): number {
    let value = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      const byte = this.buffer[this.position++];
      if (byte === undefined) throw new MalformedCheckRequest("truncated varint");
      value += (byte & 0x7f) * 2 ** shift;
      if (byte < 0x80) {
        if (value > 0xffffffff) throw new MalformedCheckRequest("varint too large");
        return value;
      }
    }
    throw new MalformedCheckRequest("varint too long");
  }

  /** The end offset of a length-delimited field that starts here. */
  end(limit: number): number {
    const length = this.uint32();
    const end = this.position + length;
    if (end > limit) throw new MalformedCheckRequest("truncated field");
    return end;
  }

  string(limit: number): string {
    const end = this.end(limit);
    const text = this.buffer.toString("utf8", this.position, end);
    this.position = end;
    return text;
  }

  bytes(limit: number): Buffer {
    const end = this.end(limit);
    const bytes = this.buffer.subarray(this.position, end);
    this.position = end;
    return bytes;
  }

  skip(wireType: number, limit: number): void {
    switch (wireType) {
      case VARINT:
        for (let i = 0; i < 10; i++) {
          const byte = this.buffer[this.position++];
          if (byte === undefined) throw new MalformedCheckRequest("truncated varint");
          if (byte < 0x80) return;
        }
        throw new MalformedCheckRequest("varint too long");
      case FIXED64:
        this.position += 8;
        break;
      case LENGTH_DELIMITED:
        this.position = this.end(limit);
        break;
      case FIXED32:
        this.position += 4;
        break;
      default:
        throw new MalformedCheckRequest(`wire type ${wireType} is not read`);
    }
    if (this.position > limit) throw new MalformedCheckRequest("truncated field");
  }
}

/** Reads the fields of one message up to `limit`; `field` gets each known one and says whether it read it. */
function fields(reader: Reader, limit: number, field: (number: number, wireType: number) => boolean): void {
  while (reader.position < limit) {
    const tag = reader.uint32();
    const number = tag >>> 3;
    const wireType = tag & 7;
    if (number === 0) throw new MalformedCheckRequest("field number 0");
    if (!field(number, wireType)) reader.skip(wireType, limit);
  }
  if (reader.position !== limit) throw new MalformedCheckRequest("truncated message");
}

function expectLengthDelimited(wireType: number): void {
  if (wireType !== LENGTH_DELIMITED) throw new MalformedCheckRequest("wire type does not fit the field");
}

/** A map<string, string> entry, set on `target` (a prototype-less object: every key is an own key). */
function mapEntry(reader: Reader, limit: number, target: Record<string, string>): void {
  const end = reader.end(limit);
  let key = "";
  let value = "";
  fields(reader, end, (number, wireType) => {
    if (number !== 1 && number !== 2) return false;
    expectLengthDelimited(wireType);
    if (number === 1) key = reader.string(end);
    else value = reader.string(end);
    return true;
  });
  target[key] = value;
}

interface HeaderValue {
  key: string;
  value: string;
  rawValue: Buffer | undefined;
}

interface HttpFields {
  id: string;
  method: string;
  path: string;
  host: string;
  scheme: string;
  headers: Record<string, string>;
  headerMap: HeaderValue[];
  body: string;
  rawBody: Buffer | undefined;
}

function headerValue(reader: Reader, limit: number): HeaderValue {
  const end = reader.end(limit);
  const header: HeaderValue = { key: "", value: "", rawValue: undefined };
  fields(reader, end, (number, wireType) => {
    if (number < 1 || number > 3) return false;
    expectLengthDelimited(wireType);
    if (number === 1) header.key = reader.string(end);
    else if (number === 2) header.value = reader.string(end);
    else header.rawValue = reader.bytes(end);
    return true;
  });
  return header;
}

function headerMap(reader: Reader, limit: number): HeaderValue[] {
  const end = reader.end(limit);
  const headers: HeaderValue[] = [];
  fields(reader, end, (number, wireType) => {
    if (number !== 1) return false;
    expectLengthDelimited(wireType);
    headers.push(headerValue(reader, end));
    return true;
  });
  return headers;
}

const STRING_FIELDS = ["", "id", "method", "", "path", "host", "scheme"] as const;

function httpRequest(reader: Reader, limit: number): HttpFields {
  const end = reader.end(limit);
  const http: HttpFields = {
    id: "",
    method: "",
    path: "",
    host: "",
    scheme: "",
    headers: Object.create(null),
    headerMap: [],
    body: "",
    rawBody: undefined,
  };
  fields(reader, end, (number, wireType) => {
    const name = STRING_FIELDS[number];
    if (name !== undefined && name !== "") {
      expectLengthDelimited(wireType);
      http[name] = reader.string(end);
      return true;
    }
    switch (number) {
      case 3:
        expectLengthDelimited(wireType);
        mapEntry(reader, end, http.headers);
        return true;
      case 11:
        expectLengthDelimited(wireType);
        http.body = reader.string(end);
        return true;
      case 12:
        expectLengthDelimited(wireType);
        http.rawBody = reader.bytes(end);
        return true;
      case 13:
        expectLengthDelimited(wireType);
        http.headerMap = headerMap(reader, end);
        return true;
      default:
        return false;
    }
  });
  return http;
}

/** AttributeContext.Request: only `http`. */
function request(reader: Reader, limit: number): HttpFields | undefined {
  const end = reader.end(limit);
  let http: HttpFields | undefined;
  fields(reader, end, (number, wireType) => {
    if (number !== 2) return false;
    expectLengthDelimited(wireType);
    http = httpRequest(reader, end);
    return true;
  });
  return http;
}

/** AttributeContext.Peer: only `principal`. */
function peerPrincipal(reader: Reader, limit: number): string {
  const end = reader.end(limit);
  let principal = "";
  fields(reader, end, (number, wireType) => {
    if (number !== 4) return false;
    expectLengthDelimited(wireType);
    principal = reader.string(end);
    return true;
  });
  return principal;
}

interface AttributeFields {
  principal: string;
  http: HttpFields | undefined;
  contextExtensions: Record<string, string>;
}

function attributeContext(reader: Reader, limit: number): AttributeFields {
  const end = reader.end(limit);
  const attributes: AttributeFields = {
    principal: "",
    http: undefined,
    contextExtensions: Object.create(null),
  };
  fields(reader, end, (number, wireType) => {
    switch (number) {
      case 1:
        expectLengthDelimited(wireType);
        attributes.principal = peerPrincipal(reader, end);
        return true;
      case 4:
        expectLengthDelimited(wireType);
        attributes.http = request(reader, end);
        return true;
      case 10:
        expectLengthDelimited(wireType);
        mapEntry(reader, end, attributes.contextExtensions);
        return true;
      default:
        return false;
    }
  });
  return attributes;
}

const lenientUtf8 = new TextDecoder("utf-8", { fatal: false });

/** The RawCheckRequest of a CheckRequest's bytes; throws on malformed bytes. */
export function decodeCheckRequest(bytes: Buffer): RawCheckRequest {
  const reader = new Reader(bytes, 0);
  let attributes: AttributeFields | undefined;
  fields(reader, bytes.length, (number, wireType) => {
    if (number !== 1) return false;
    expectLengthDelimited(wireType);
    attributes = attributeContext(reader, bytes.length);
    return true;
  });
  const http = attributes?.http;
  return {
    id: http?.id ?? "",
    method: http?.method ?? "",
    path: http?.path ?? "",
    host: http?.host ?? "",
    scheme: http?.scheme ?? "",
    headers: Object.entries(http?.headers ?? {}),
    headerMap: (http?.headerMap ?? []).map(({ key, value, rawValue }) => [
      key,
      value || (rawValue === undefined ? "" : lenientUtf8.decode(rawValue)),
    ]),
    contextExtensions: Object.entries(attributes?.contextExtensions ?? {}),
    principal: attributes?.principal ?? "",
    body: http?.body ?? "",
    ...(http?.rawBody === undefined ? {} : { rawBody: http.rawBody }),
  };
}
