import type {
  CheckResponse,
  HeaderAppendAction,
  HeaderValueOption,
  ProtoStruct,
  ProtoStructValue,
  QueryParameter,
} from "./proto.ts";

/**
 * Encodes a CheckResponse to protobuf bytes, field by field, in field-number order — the
 * bytes protobufjs writes for the same message (test/servers/sidecar/grpc/check-response-wire.test.ts
 * compares them). Every Check is answered through here: writing into one reused buffer
 * avoids protobufjs' fromObject copy, its writer's operation list and their garbage, which
 * cost more per Check than deciding.
 *
 * A string that is not well-formed UTF-16 (a lone surrogate) has no UTF-8 form: encoding
 * throws, and the server denies (it never sends a replacement character instead).
 */

const APPEND_ACTIONS: Readonly<Record<HeaderAppendAction, number>> = {
  APPEND_IF_EXISTS_OR_ADD: 0,
  ADD_IF_ABSENT: 1,
  OVERWRITE_IF_EXISTS_OR_ADD: 2,
  OVERWRITE_IF_EXISTS: 3,
};

const LENGTH_DELIMITED = 2;
const VARINT = 0;
const FIXED64 = 1;
/** Room left for a nested message's length (a varint of up to 5 bytes), closed up after. */
const LENGTH_ROOM = 5;

let buffer = Buffer.allocUnsafe(16 * 1024);
let position = 0;

function ensure(bytes: number): void {
  if (position + bytes <= buffer.length) return;
  const grown = Buffer.allocUnsafe(Math.max(buffer.length * 2, position + bytes));
  buffer.copy(grown, 0, 0, position);
  buffer = grown;
}

/** An unsigned varint of a value below 2^32. */
function varint(value: number): void {
  ensure(5);
  let rest = value >>> 0;
  while (rest > 0x7f) {
    buffer[position++] = (rest & 0x7f) | 0x80;
    rest >>>= 7;
  }
  buffer[position++] = rest;
}

/** An int32 as protobuf writes it: a negative value is sign-extended to ten bytes. */
function int32(value: number): void {
  if (value >= 0) {
    varint(value);
    return;
  }
  ensure(10);
  let low = value >>> 0;
  for (let i = 0; i < 4; i++) {
    buffer[position++] = (low & 0x7f) | 0x80;
    low >>>= 7;
  }
  // Bits 28–31 of the value, then the sign extension's ones.
  buffer[position++] = (low & 0x0f) | 0x70 | 0x80;
  for (let i = 0; i < 4; i++) buffer[position++] = 0xff;
  buffer[position++] = 0x01;
}

function tag(field: number, wireType: number): void {
  varint((field << 3) | wireType);
}

function string(field: number, value: string): void {
  if (typeof value !== "string") throw new TypeError(`field ${field} must be a string`);
  if (!value.isWellFormed()) throw new TypeError(`field ${field} is not well-formed UTF-16`);
  tag(field, LENGTH_DELIMITED);
  // At most three UTF-8 bytes per UTF-16 unit; the length is known once written.
  ensure(LENGTH_ROOM + value.length * 3);
  const at = position;
  const written = buffer.write(value, at + LENGTH_ROOM, "utf8");
  position = at + LENGTH_ROOM + written;
  close(at);
}

function bytes(field: number, value: Uint8Array): void {
  tag(field, LENGTH_DELIMITED);
  varint(value.byteLength);
  ensure(value.byteLength);
  buffer.set(value, position);
  position += value.byteLength;
}

/** Starts a length-delimited field; `close` writes its length once the content is written. */
function open(field: number): number {
  tag(field, LENGTH_DELIMITED);
  ensure(LENGTH_ROOM);
  const at = position;
  position += LENGTH_ROOM;
  return at;
}

function close(at: number): void {
  const length = position - at - LENGTH_ROOM;
  position = at;
  varint(length);
  if (position !== at + LENGTH_ROOM) buffer.copyWithin(position, at + LENGTH_ROOM, at + LENGTH_ROOM + length);
  position += length;
}

function present<T>(value: T | null | undefined): value is T {
  return value !== undefined && value !== null;
}

function headerValueOption(field: number, option: HeaderValueOption): void {
  const at = open(field);
  const header = option.header;
  if (present(header)) {
    const inner = open(1);
    if (present(header.key)) string(1, header.key);
    if (present(header.value)) string(2, header.value);
    if (present(header.raw_value)) bytes(3, header.raw_value);
    close(inner);
  }
  if (present(option.append)) {
    const inner = open(2);
    if (present(option.append.value)) {
      tag(1, VARINT);
      varint(option.append.value ? 1 : 0);
    }
    close(inner);
  }
  if (present(option.append_action)) {
    const action = APPEND_ACTIONS[option.append_action];
    if (action === undefined) throw new TypeError("unknown append_action");
    tag(3, VARINT);
    varint(action);
  }
  if (present(option.keep_empty_value)) {
    tag(4, VARINT);
    varint(option.keep_empty_value ? 1 : 0);
  }
  close(at);
}

function queryParameter(field: number, parameter: QueryParameter): void {
  const at = open(field);
  if (present(parameter.key)) string(1, parameter.key);
  if (present(parameter.value)) string(2, parameter.value);
  close(at);
}

function double(field: number, value: number): void {
  tag(field, FIXED64);
  ensure(8);
  buffer.writeDoubleLE(value, position);
  position += 8;
}

function structValue(field: number, value: ProtoStructValue): void {
  const at = open(field);
  if ("nullValue" in value && present(value.nullValue)) {
    tag(1, VARINT);
    varint(0);
  }
  if ("numberValue" in value && present(value.numberValue)) double(2, Number(value.numberValue));
  if ("stringValue" in value && present(value.stringValue)) string(3, String(value.stringValue));
  if ("boolValue" in value && present(value.boolValue)) {
    tag(4, VARINT);
    varint(value.boolValue ? 1 : 0);
  }
  if ("structValue" in value && present(value.structValue)) struct(5, value.structValue);
  if ("listValue" in value && present(value.listValue)) {
    const list = open(6);
    for (const item of value.listValue.values ?? []) structValue(1, item);
    close(list);
  }
  close(at);
}

function struct(field: number, value: ProtoStruct): void {
  const at = open(field);
  const fields = value.fields;
  if (present(fields)) {
    for (const key of Object.keys(fields)) {
      const member = fields[key];
      if (member === undefined) continue;
      const entry = open(1);
      string(1, key);
      structValue(2, member);
      close(entry);
    }
  }
  close(at);
}

function repeatedHeaders(field: number, options: readonly HeaderValueOption[] | undefined): void {
  for (const option of options ?? []) headerValueOption(field, option);
}

function repeatedStrings(field: number, values: readonly string[] | undefined): void {
  for (const value of values ?? []) string(field, value);
}

function write(response: CheckResponse): void {
  const status = open(1);
  if (present(response.status.code)) {
    tag(1, VARINT);
    int32(response.status.code);
  }
  if (present(response.status.message)) string(2, response.status.message);
  close(status);
  if ("denied_response" in response) {
    const denied = response.denied_response;
    const at = open(2);
    if (present(denied.status)) {
      if (typeof denied.status.code !== "number") throw new TypeError("HttpStatus code must be a number");
      const inner = open(1);
      tag(1, VARINT);
      int32(denied.status.code);
      close(inner);
    }
    repeatedHeaders(2, denied.headers);
    if (present(denied.body)) string(3, denied.body);
    close(at);
  } else {
    const ok = response.ok_response;
    const at = open(3);
    repeatedHeaders(2, ok.headers);
    repeatedStrings(5, ok.headers_to_remove);
    repeatedHeaders(6, ok.response_headers_to_add);
    for (const parameter of ok.query_parameters_to_set ?? []) queryParameter(7, parameter);
    repeatedStrings(8, ok.query_parameters_to_remove);
    close(at);
  }
  if (present(response.dynamic_metadata)) struct(4, response.dynamic_metadata);
}

/** The protobuf bytes of a CheckResponse (a new Buffer: the server may hold it while it is sent). */
export function encodeCheckResponse(response: CheckResponse): Buffer {
  position = 0;
  write(response);
  const out = Buffer.allocUnsafe(position);
  buffer.copy(out, 0, 0, position);
  return out;
}
