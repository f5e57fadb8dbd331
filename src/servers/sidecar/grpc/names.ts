/** The gRPC names the sidecar serves (Envoy's and grpc.health.v1's exact package names). */

export const AUTHORIZATION_SERVICE = "envoy.service.auth.v3.Authorization";
export const HEALTH_SERVICE = "grpc.health.v1.Health";

export const CHECK_PATH = `/${AUTHORIZATION_SERVICE}/Check`;
export const HEALTH_CHECK_PATH = `/${HEALTH_SERVICE}/Check`;
export const HEALTH_WATCH_PATH = `/${HEALTH_SERVICE}/Watch`;
