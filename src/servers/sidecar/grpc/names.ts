/**
 * The gRPC names the sidecar serves, in their own module so the server can use them without
 * loading the .proto files (proto.ts does, for clients, tests and the benchmark).
 */

export const AUTHORIZATION_SERVICE = "envoy.service.auth.v3.Authorization";
export const HEALTH_SERVICE = "grpc.health.v1.Health";

export const CHECK_PATH = `/${AUTHORIZATION_SERVICE}/Check`;
export const HEALTH_CHECK_PATH = `/${HEALTH_SERVICE}/Check`;
export const HEALTH_WATCH_PATH = `/${HEALTH_SERVICE}/Watch`;
