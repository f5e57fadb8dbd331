import { fileURLToPath } from "node:url";
import { loadSync, type Options, type PackageDefinition, type ServiceDefinition } from "@grpc/proto-loader";

/**
 * The Envoy ext_authz v3 and gRPC health protos, loaded once from `proto/`.
 *
 * Loader options, and why:
 * - `keepCase: true`: field names stay as in the .proto (`denied_response`, `headers_to_remove`),
 *   the names Envoy's docs use. Exception: the google.protobuf well-known types come from
 *   protobufjs' bundled descriptors, whose field names are camelCase whatever keepCase says —
 *   so a `google.protobuf.Value` is `{ stringValue }`, `{ numberValue }`, `{ boolValue }`, ….
 * - `enums: String`: decoded enums are their names (`"OVERWRITE_IF_EXISTS_OR_ADD"`, `"SERVING"`,
 *   `"Unauthorized"`), readable in logs and tests. On encode the loader accepts a name or a
 *   number; we write `envoy.type.v3.HttpStatus.code` as the number because Envoy's enum values
 *   are the HTTP status codes themselves.
 * - `longs: String`: int64 (`HttpRequest.size`, `Timestamp.seconds`) decode to strings, no
 *   precision loss.
 * - `defaults: true`: absent scalars decode to their zero value, absent messages to `null`.
 * - `oneofs: true`: a decoded oneof also names its set member (`http_response: "ok_response"`).
 *
 * `google/protobuf/{struct,timestamp,wrappers,any}.proto` are not in `proto/`: protobufjs
 * resolves those import names to its bundled copies before looking at `includeDirs`.
 */

/** The directory holding the .proto files (the repository's `proto/`). */
export const protoDir: string = fileURLToPath(new URL("../../../../proto/", import.meta.url));

export const protoFiles: readonly string[] = [
  "envoy/service/auth/v3/external_auth.proto",
  "grpc/health/v1/health.proto",
];

export const protoLoaderOptions: Readonly<Options> = Object.freeze({
  keepCase: true,
  enums: String,
  longs: String,
  defaults: true,
  oneofs: true,
  includeDirs: [protoDir],
});

import { AUTHORIZATION_SERVICE, HEALTH_SERVICE } from "./names.ts";

export { AUTHORIZATION_SERVICE, HEALTH_SERVICE };

export interface LoadedProtos {
  readonly packageDefinition: PackageDefinition;
  readonly authorization: ServiceDefinition;
  readonly health: ServiceDefinition;
}

let loaded: LoadedProtos | undefined;

function serviceOf(definition: PackageDefinition, name: string): ServiceDefinition {
  const entry = definition[name];
  if (entry === undefined || !("Check" in entry)) {
    throw new Error(`proto service ${name} is missing from ${protoDir}`);
  }
  return entry as ServiceDefinition;
}

/** Loads and caches the package definition; later calls return the same objects. */
export function loadProtos(): LoadedProtos {
  if (loaded === undefined) {
    const packageDefinition = loadSync([...protoFiles], { ...protoLoaderOptions });
    loaded = {
      packageDefinition,
      authorization: serviceOf(packageDefinition, AUTHORIZATION_SERVICE),
      health: serviceOf(packageDefinition, HEALTH_SERVICE),
    };
  }
  return loaded;
}

// ---- Message shapes as the loader produces and accepts them (options above). ----
// Decoded messages: every field present (defaults: true), messages may be null. The server
// still reads them defensively: a peer other than Envoy may send anything.

export type ProtoStructValue =
  | { nullValue: "NULL_VALUE" | 0 }
  | { numberValue: number }
  | { stringValue: string }
  | { boolValue: boolean }
  | { structValue: ProtoStruct }
  | { listValue: { values: ProtoStructValue[] } };

/** google.protobuf.Struct (camelCase members, see above). */
export interface ProtoStruct {
  fields: Record<string, ProtoStructValue>;
}

/** google.protobuf.Timestamp; `seconds` is a string because longs are strings. */
export interface ProtoTimestamp {
  seconds?: string | number;
  nanos?: number;
}

/** envoy.config.core.v3.HeaderValue. */
export interface HeaderValue {
  key?: string;
  value?: string;
  raw_value?: Uint8Array;
}

export type HeaderAppendAction =
  | "APPEND_IF_EXISTS_OR_ADD"
  | "ADD_IF_ABSENT"
  | "OVERWRITE_IF_EXISTS_OR_ADD"
  | "OVERWRITE_IF_EXISTS";

/** envoy.config.core.v3.HeaderValueOption. */
export interface HeaderValueOption {
  header?: HeaderValue | null;
  append?: { value: boolean } | null;
  append_action?: HeaderAppendAction;
  keep_empty_value?: boolean;
}

/** envoy.config.core.v3.HeaderMap. */
export interface HeaderMap {
  headers?: HeaderValue[];
}

/** envoy.config.core.v3.Metadata. */
export interface Metadata {
  filter_metadata?: Record<string, ProtoStruct>;
}

/** envoy.config.core.v3.QueryParameter. */
export interface QueryParameter {
  key?: string;
  value?: string;
}

/** envoy.config.core.v3.SocketAddress. */
export interface SocketAddress {
  protocol?: "TCP" | "UDP";
  address?: string;
  port_value?: number;
  named_port?: string;
  port_specifier?: "port_value" | "named_port";
}

/** envoy.config.core.v3.Address. */
export interface Address {
  socket_address?: SocketAddress | null;
  pipe?: { path?: string; mode?: number } | null;
  envoy_internal_address?: { server_listener_name?: string; endpoint_id?: string } | null;
  address?: "socket_address" | "pipe" | "envoy_internal_address";
}

/** envoy.service.auth.v3.AttributeContext.Peer. */
export interface Peer {
  address?: Address | null;
  service?: string;
  labels?: Record<string, string>;
  principal?: string;
  certificate?: string;
}

/** envoy.service.auth.v3.AttributeContext.HttpRequest. */
export interface HttpRequest {
  id?: string;
  method?: string;
  headers?: Record<string, string>;
  path?: string;
  host?: string;
  scheme?: string;
  query?: string;
  fragment?: string;
  size?: string | number;
  protocol?: string;
  body?: string;
  raw_body?: Uint8Array;
  header_map?: HeaderMap | null;
}

/** envoy.service.auth.v3.AttributeContext.Request. */
export interface AttributeRequest {
  time?: ProtoTimestamp | null;
  http?: HttpRequest | null;
}

/** envoy.service.auth.v3.AttributeContext. */
export interface AttributeContext {
  source?: Peer | null;
  destination?: Peer | null;
  request?: AttributeRequest | null;
  context_extensions?: Record<string, string>;
  metadata_context?: Metadata | null;
  tls_session?: { sni?: string } | null;
  route_metadata_context?: Metadata | null;
}

/** envoy.service.auth.v3.CheckRequest. */
export interface CheckRequest {
  attributes?: AttributeContext | null;
}

/** google.rpc.Status (details are never sent by us). */
export interface RpcStatus {
  code: number;
  message?: string;
}

/** envoy.type.v3.HttpStatus: the number on encode, the enum name on decode. */
export interface HttpStatus {
  code: number | string;
}

/** envoy.service.auth.v3.DeniedHttpResponse. */
export interface DeniedHttpResponse {
  status: HttpStatus;
  headers: HeaderValueOption[];
  body: string;
}

/** envoy.service.auth.v3.OkHttpResponse (the deprecated dynamic_metadata = 3 is never set). */
export interface OkHttpResponse {
  headers: HeaderValueOption[];
  headers_to_remove: string[];
  response_headers_to_add?: HeaderValueOption[];
  query_parameters_to_set?: QueryParameter[];
  query_parameters_to_remove?: string[];
}

/** envoy.service.auth.v3.CheckResponse as the server writes it: exactly one of the oneof. */
export type CheckResponse =
  | { status: RpcStatus; ok_response: OkHttpResponse; dynamic_metadata?: ProtoStruct }
  | { status: RpcStatus; denied_response: DeniedHttpResponse; dynamic_metadata?: ProtoStruct };

export type ServingStatus = "UNKNOWN" | "SERVING" | "NOT_SERVING" | "SERVICE_UNKNOWN";

/** grpc.health.v1.HealthCheckRequest. */
export interface HealthCheckRequest {
  service?: string;
}

/** grpc.health.v1.HealthCheckResponse. */
export interface HealthCheckResponse {
  status: ServingStatus;
}
