import { buildCheckInput, type ParsedCheckRequest } from "./check-input.ts";
import { bag, headerName, isHeaderToSet, isMetadataFact, isQueryParameter } from "./check-response.ts";
import type { CheckResponse, HeaderValueOption, ProtoStruct, ProtoStructValue } from "./proto.ts";

/**
 * The Check hot path's protobuf codec, written out by hand for the few messages ext_authz
 * exchanges: a CheckRequest is read straight into a CheckInput (no decoded message tree,
 * no defaults filled in for the dozens of fields nobody reads), and a CheckResponse is
 * written straight into one buffer. Field numbers are Envoy's (proto/envoy/...); the
 * results are the same as proto-loader's decode + `parseCheckRequest`, and as its encode,
 * which test/servers/sidecar/grpc/codec.test.ts checks against each other.
 *
 * Reading is total: a truncated message, a bad varint, a field of a known number with the
 * wrong wire type or a reserved wire type throws `MalformedMessage`, which the server turns
 * into a deny (400 invalid_request). Unknown fields are skipped, as protobuf requires. When a
 * singular message field occurs more than once the last occurrence counts (as protobufjs).
 */

export class MalformedMessage extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MalformedMessage";
  }
}

const VARINT = 0;
const FIXED64 = 1;
const LEN = 2;
const FIXED32 = 5;

/** A cursor over one message's bytes [pos, end). */
interface Cursor {
  readonly bytes: Uint8Array;
  pos: number;
  readonly end: number;
}

function varint(c: Cursor): number {
  let result = 0;
  let shift = 0;
  for (;;) {
    if (c.pos >= c.end) throw new MalformedMessage("truncated varint");
    const byte = c.bytes[c.pos++] as number;
    if (shift < 28) result |= (byte & 0x7f) << shift;
    else if (shift < 53) result += (byte & 0x7f) * 2 ** shift;
    else if (shift > 63) throw new MalformedMessage("varint too long");
    if ((byte & 0x80) === 0) return shift < 28 ? result >>> 0 : result;
    shift += 7;
  }
}

/** Skips one field's value of `wire` type. */
function skip(c: Cursor, wire: number): void {
  switch (wire) {
    case VARINT:
      varint(c);
      return;
    case FIXED64:
      c.pos += 8;
      break;
    case LEN: {
      // Read the length first: `c.pos += varint(c)` would add it to the position before it.
      const length = varint(c);
      c.pos += length;
      break;
    }
    case FIXED32:
      c.pos += 4;
      break;
    default:
      // 3/4 (groups) are not used by these messages; 6/7 do not exist.
      throw new MalformedMessage(`unexpected wire type ${wire}`);
  }
  if (c.pos > c.end) throw new MalformedMessage("truncated field");
}

/** The next length-delimited value as a sub-cursor; the parent moves past it. */
function lengthDelimited(c: Cursor, wire: number): Cursor {
  if (wire !== LEN) throw new MalformedMessage("expected a length-delimited field");
  const length = varint(c);
  const start = c.pos;
  const end = start + length;
  if (end > c.end) throw new MalformedMessage("truncated field");
  c.pos = end;
  return { bytes: c.bytes, pos: start, end };
}

const utf8 = new TextDecoder("utf-8", { fatal: false });

/** Buffer's own slice-to-string (what Buffer#toString uses), without a subarray per string. */
interface Utf8Sliceable {
  utf8Slice(start: number, end: number): string;
}

function text(c: Cursor, wire: number): string {
  const value = lengthDelimited(c, wire);
  if (value.end === value.pos) return "";
  const bytes = value.bytes;
  // Invalid UTF-8 becomes U+FFFD either way (the WHATWG decoder, as proto-loader reads it).
  return bytes instanceof Buffer
    ? (bytes as unknown as Utf8Sliceable).utf8Slice(value.pos, value.end)
    : utf8.decode(bytes.subarray(value.pos, value.end));
}

/**
 * key = 1, value = 2 (both defaulting to ""): a map<string, string> entry, or with
 * `rawValueField` a HeaderValue, whose raw_value (3) stands in for an empty value.
 */
function keyValue(c: Cursor, rawValueField?: number): [string, string] {
  let key = "";
  let value = "";
  let raw = "";
  while (c.pos < c.end) {
    const tag = varint(c);
    const field = tag >>> 3;
    const wire = tag & 7;
    if (field === 1) key = text(c, wire);
    else if (field === 2) value = text(c, wire);
    else if (field === rawValueField) raw = text(c, wire);
    else skip(c, wire);
  }
  return [key, value || raw];
}

/** The fields of HttpRequest the engine reads. */
interface RawHttp {
  id: string;
  method: string;
  path: string;
  host: string;
  scheme: string;
  /** Map entries in wire order; a repeated key keeps its first position and its last value. */
  headers: Map<string, string>;
  /** header_map entries: [key, value or raw_value as text]. */
  headerMap: Array<[string, string]>;
  body: string;
  rawBody: Uint8Array | undefined;
}

function headerMap(c: Cursor, into: Array<[string, string]>): void {
  while (c.pos < c.end) {
    const tag = varint(c);
    const wire = tag & 7;
    if (tag >>> 3 === 1) into.push(keyValue(lengthDelimited(c, wire), 3));
    else skip(c, wire);
  }
}

function httpRequest(c: Cursor): RawHttp {
  const http: RawHttp = {
    id: "",
    method: "",
    path: "",
    host: "",
    scheme: "",
    headers: new Map(),
    headerMap: [],
    body: "",
    rawBody: undefined,
  };
  let map: Array<[string, string]> = [];
  while (c.pos < c.end) {
    const tag = varint(c);
    const field = tag >>> 3;
    const wire = tag & 7;
    switch (field) {
      case 1:
        http.id = text(c, wire);
        break;
      case 2:
        http.method = text(c, wire);
        break;
      case 3: {
        const [key, value] = keyValue(lengthDelimited(c, wire));
        http.headers.set(key, value);
        break;
      }
      case 4:
        http.path = text(c, wire);
        break;
      case 5:
        http.host = text(c, wire);
        break;
      case 6:
        http.scheme = text(c, wire);
        break;
      case 11:
        http.body = text(c, wire);
        break;
      case 12: {
        const value = lengthDelimited(c, wire);
        // A copy: the request's buffer is not kept alive by a decision.
        http.rawBody = Buffer.from(value.bytes.subarray(value.pos, value.end));
        break;
      }
      case 13:
        // A repeated singular message: the last one counts.
        map = [];
        headerMap(lengthDelimited(c, wire), map);
        break;
      default:
        skip(c, wire);
    }
  }
  http.headerMap = map;
  return http;
}

/** The (last) value of one string field of the message under the cursor; other fields are skipped. */
function stringField(c: Cursor, field: number): string {
  let value = "";
  while (c.pos < c.end) {
    const tag = varint(c);
    const wire = tag & 7;
    if (tag >>> 3 === field) value = text(c, wire);
    else skip(c, wire);
  }
  return value;
}

/** Peer: principal = 4. */
const peerPrincipal = (c: Cursor): string => stringField(c, 4);

/** AttributeContext.Request: http = 2. */
function requestHttp(c: Cursor): RawHttp | undefined {
  let http: RawHttp | undefined;
  while (c.pos < c.end) {
    const tag = varint(c);
    const wire = tag & 7;
    if (tag >>> 3 === 2) http = httpRequest(lengthDelimited(c, wire));
    else skip(c, wire);
  }
  return http;
}

/**
 * Reads a serialized CheckRequest into the CheckInput `parseCheckRequest` would make of its
 * proto-loader decoding. Throws MalformedMessage for bytes that are not a CheckRequest.
 */
export function decodeCheckRequest(bytes: Uint8Array): ParsedCheckRequest {
  const top: Cursor = { bytes, pos: 0, end: bytes.length };
  let attributes: Cursor | undefined;
  while (top.pos < top.end) {
    const tag = varint(top);
    const wire = tag & 7;
    if (tag >>> 3 === 1) attributes = lengthDelimited(top, wire);
    else skip(top, wire);
  }
  let http: RawHttp | undefined;
  let principal = "";
  const contextExtensions = new Map<string, string>();
  if (attributes !== undefined) {
    while (attributes.pos < attributes.end) {
      const tag = varint(attributes);
      const field = tag >>> 3;
      const wire = tag & 7;
      if (field === 1) principal = peerPrincipal(lengthDelimited(attributes, wire));
      else if (field === 4) http = requestHttp(lengthDelimited(attributes, wire));
      else if (field === 10) {
        const [key, value] = keyValue(lengthDelimited(attributes, wire));
        contextExtensions.set(key, value);
      } else skip(attributes, wire);
    }
  }
  return buildCheckInput({
    id: http?.id ?? "",
    method: http?.method ?? "",
    path: http?.path ?? "",
    host: http?.host ?? "",
    scheme: http?.scheme ?? "",
    headers: http?.headers ?? new Map(),
    headerMap: http?.headerMap ?? [],
    contextExtensions,
    principal,
    body: http?.body ?? "",
    rawBody: http?.rawBody,
  });
}

// ---- Writing ----

/**
 * A growable byte buffer with protobuf primitives. A nested message is written between
 * `begin` (which reserves one byte for its length) and `end` (which fills it in, moving the
 * body in the rare case the length needs more than one byte) — no closures, no sub-buffers.
 */
class Writer {
  private buffer: Buffer;
  length = 0;

  constructor(capacity: number) {
    this.buffer = Buffer.allocUnsafe(capacity);
  }

  private ensure(extra: number): void {
    if (this.length + extra <= this.buffer.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buffer.length * 2, this.length + extra));
    this.buffer.copy(next, 0, 0, this.length);
    this.buffer = next;
  }

  varint(value: number): void {
    this.ensure(10);
    let v = value;
    if (v < 0) {
      // int32 negatives are sign-extended to 64 bits: ten bytes.
      for (let i = 0; i < 9; i++) {
        this.buffer[this.length++] = (v & 0x7f) | 0x80;
        v >>= 7;
      }
      this.buffer[this.length++] = 1;
      return;
    }
    while (v > 0x7f) {
      this.buffer[this.length++] = (v & 0x7f) | 0x80;
      v = Math.floor(v / 128);
    }
    this.buffer[this.length++] = v;
  }

  tag(field: number, wire: number): void {
    this.varint((field << 3) | wire);
  }

  /** Starts a length-delimited field; returns where its length goes. */
  begin(field: number): number {
    this.tag(field, LEN);
    this.ensure(1);
    return this.length++;
  }

  /** Ends the field `begin` started: writes its length. */
  end(at: number): void {
    const size = this.length - at - 1;
    if (size < 0x80) {
      this.buffer[at] = size;
      return;
    }
    let lengthBytes = 1;
    for (let v = size; v > 0x7f; v = Math.floor(v / 128)) lengthBytes++;
    this.ensure(lengthBytes - 1);
    this.buffer.copy(this.buffer, at + lengthBytes, at + 1, this.length);
    let v = size;
    let i = at;
    while (v > 0x7f) {
      this.buffer[i++] = (v & 0x7f) | 0x80;
      v = Math.floor(v / 128);
    }
    this.buffer[i] = v;
    this.length += lengthBytes - 1;
  }

  /** A string field (written even when empty, as protobufjs writes set fields). */
  string(field: number, value: string): void {
    const at = this.begin(field);
    this.ensure(value.length * 3);
    this.length += this.buffer.write(value, this.length, "utf8");
    this.end(at);
  }

  double(field: number, value: number): void {
    this.tag(field, FIXED64);
    this.ensure(8);
    this.buffer.writeDoubleLE(value, this.length);
    this.length += 8;
  }

  finish(): Buffer {
    return this.buffer.subarray(0, this.length);
  }
}

const APPEND_ACTIONS: Readonly<Record<string, number>> = {
  APPEND_IF_EXISTS_OR_ADD: 0,
  ADD_IF_ABSENT: 1,
  OVERWRITE_IF_EXISTS_OR_ADD: 2,
  OVERWRITE_IF_EXISTS: 3,
};

/** HeaderValueOption: header = 1 {key = 1, value = 2}, append_action = 3. */
function headerOptions(w: Writer, field: number, options: readonly HeaderValueOption[]): void {
  for (const option of options) {
    const at = w.begin(field);
    const header = option.header;
    if (header !== undefined && header !== null) {
      const headerAt = w.begin(1);
      if (header.key !== undefined) w.string(1, header.key);
      if (header.value !== undefined) w.string(2, header.value);
      w.end(headerAt);
    }
    if (option.append_action !== undefined) {
      w.tag(3, VARINT);
      w.varint(APPEND_ACTIONS[option.append_action] ?? 0);
    }
    w.end(at);
  }
}

/** One google.protobuf.Struct entry: key = 1, value = 2 (Value: number = 2, string = 3, bool = 4). */
function structField(w: Writer, key: string, value: string | number | boolean): void {
  const at = w.begin(1);
  w.string(1, key);
  const valueAt = w.begin(2);
  if (typeof value === "string") w.string(3, value);
  else if (typeof value === "number") w.double(2, value);
  else {
    w.tag(4, VARINT);
    w.varint(value ? 1 : 0);
  }
  w.end(valueAt);
  w.end(at);
}

function structMember(value: ProtoStructValue): string | number | boolean {
  if ("stringValue" in value) return value.stringValue;
  if ("numberValue" in value) return value.numberValue;
  if ("boolValue" in value) return value.boolValue;
  throw new TypeError("unsupported Struct value");
}

/** google.protobuf.Struct: fields = 1 (map<string, Value>). */
function struct(w: Writer, field: number, value: ProtoStruct): void {
  const at = w.begin(field);
  for (const [key, member] of Object.entries(value.fields)) structField(w, key, structMember(member));
  w.end(at);
}

/**
 * Writes a CheckResponse as the server builds it (check-response.ts): status, then
 * denied_response or ok_response, then dynamic_metadata — bytes equal to proto-loader's.
 */
export function encodeCheckResponse(response: CheckResponse): Buffer {
  const w = new Writer(512);
  const statusAt = w.begin(1);
  w.tag(1, VARINT);
  w.varint(response.status.code);
  if (response.status.message !== undefined) w.string(2, response.status.message);
  w.end(statusAt);
  if ("denied_response" in response) {
    const denied = response.denied_response;
    const deniedAt = w.begin(2);
    const httpStatusAt = w.begin(1);
    w.tag(1, VARINT);
    w.varint(Number(denied.status.code));
    w.end(httpStatusAt);
    headerOptions(w, 2, denied.headers);
    w.string(3, denied.body);
    w.end(deniedAt);
  } else {
    const ok = response.ok_response;
    const okAt = w.begin(3);
    headerOptions(w, 2, ok.headers);
    for (const name of ok.headers_to_remove) w.string(5, name);
    if (ok.response_headers_to_add !== undefined) headerOptions(w, 6, ok.response_headers_to_add);
    for (const parameter of ok.query_parameters_to_set ?? []) {
      const parameterAt = w.begin(7);
      if (parameter.key !== undefined) w.string(1, parameter.key);
      if (parameter.value !== undefined) w.string(2, parameter.value);
      w.end(parameterAt);
    }
    for (const name of ok.query_parameters_to_remove ?? []) w.string(8, name);
    w.end(okAt);
    if (response.dynamic_metadata !== undefined) struct(w, 4, response.dynamic_metadata);
  }
  return w.finish();
}

const OVERWRITE_IF_EXISTS_OR_ADD = 2;
const INTEGER_KEY = /^[0-9]+$/;

/**
 * The allow path in one pass: when `value` is a well-formed allow decision (the rules of
 * `validateDecision`), the bytes of its CheckResponse — the same bytes as
 * `encodeCheckResponse(allowResponse(validateDecision(value)))`, without building either.
 * Undefined for anything else (a deny, or a malformed value): the caller takes the general
 * path, which never turns those into an allow.
 */
export function encodeAllowDecision(value: unknown): Buffer | undefined {
  const decision = bag(value);
  if (decision === undefined || decision.allow !== true) return undefined;
  const toSet = bag(decision.headersToSet);
  const toRemove = decision.headersToRemove;
  const metadata = bag(decision.dynamicMetadata);
  if (toSet === undefined || metadata === undefined || !Array.isArray(toRemove)) return undefined;

  // Everything is read once into these, checked, then written.
  // Headers: lower-cased names; a name given twice keeps its first place and its last value.
  const headers = new Map<string, string>();
  for (const name in toSet) {
    if (!Object.hasOwn(toSet, name)) continue;
    const headerValue = toSet[name];
    const key = name.toLowerCase();
    // An integer-like name would move to the front of an object's keys: the general path keeps that order.
    if (INTEGER_KEY.test(key) || !isHeaderToSet(key, headerValue)) return undefined;
    headers.set(key, headerValue);
  }
  const remove: string[] = [];
  for (const name of toRemove as readonly unknown[]) {
    if (typeof name !== "string") return undefined;
    const lower = name.toLowerCase();
    if (!headerName.test(lower)) return undefined;
    remove.push(lower);
  }
  const facts: Array<[string, string | number | boolean]> = [];
  for (const key in metadata) {
    if (!Object.hasOwn(metadata, key)) continue;
    const entry = metadata[key];
    if (!isMetadataFact(entry)) return undefined;
    facts.push([key, entry]);
  }
  const parameters: Array<[string, string]> = [];
  if (decision.queryParametersToSet !== undefined) {
    const query = bag(decision.queryParametersToSet);
    if (query === undefined) return undefined;
    for (const name in query) {
      if (!Object.hasOwn(query, name)) continue;
      const queryValue = query[name];
      if (!isQueryParameter(name, queryValue)) return undefined;
      parameters.push([name, queryValue]);
    }
  }

  const w = new Writer(512);
  const statusAt = w.begin(1);
  w.tag(1, VARINT);
  w.varint(0);
  w.end(statusAt);
  const okAt = w.begin(3);
  for (const [key, headerValue] of headers) {
    const optionAt = w.begin(2);
    const headerAt = w.begin(1);
    w.string(1, key);
    w.string(2, headerValue);
    w.end(headerAt);
    w.tag(3, VARINT);
    w.varint(OVERWRITE_IF_EXISTS_OR_ADD);
    w.end(optionAt);
  }
  for (const name of remove) w.string(5, name);
  for (const [name, parameterValue] of parameters) {
    const parameterAt = w.begin(7);
    w.string(1, name);
    w.string(2, parameterValue);
    w.end(parameterAt);
  }
  w.end(okAt);
  const structAt = w.begin(4);
  for (const [key, entry] of facts) structField(w, key, entry);
  w.end(structAt);
  return w.finish();
}

// ---- grpc.health.v1 ----

/** HealthCheckRequest: service = 1. Throws MalformedMessage for bytes that are not one. */
export function decodeHealthCheckRequest(bytes: Uint8Array): string {
  return stringField({ bytes, pos: 0, end: bytes.length }, 1);
}

const SERVING_STATUS: Readonly<Record<string, number>> = {
  UNKNOWN: 0,
  SERVING: 1,
  NOT_SERVING: 2,
  SERVICE_UNKNOWN: 3,
};

/** HealthCheckResponse: status = 1 (enum ServingStatus). */
export function encodeHealthCheckResponse(status: string): Buffer {
  return Buffer.from([0x08, SERVING_STATUS[status] ?? 0]);
}
