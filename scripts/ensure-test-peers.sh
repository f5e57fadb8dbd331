#!/usr/bin/env bash
# Test peers from Debian's packages, for the interop tests: gRPC C-core (python3-grpcio), a
# gRPC client whose HTTP/2 stack shares no code with Node's. Installed only when missing and
# only where it can be (root with apt-get); elsewhere the interop tests report themselves
# skipped, with the reason.
set -u
cd "$(dirname "$0")/.."
has_peer() { /usr/bin/python3 -c "import grpc" >/dev/null 2>&1; }
has_peer && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-test-peers: python3-grpcio is missing and cannot be installed here (needs root and apt-get); its interop tests will be skipped"
  exit 0
fi
mkdir -p .tools
log=.tools/test-peers.log
echo "ensure-test-peers: installing python3-grpcio (Debian) for the gRPC interop tests"
# A machine whose package lists are stale or absent needs an update first. The whole attempt
# is bounded, so an unreachable mirror costs the test run at most two minutes.
timeout 120 bash -c '
  install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-grpcio; }
  install || { apt-get update -q && install; }
' >>"$log" 2>&1
has_peer || echo "ensure-test-peers: python3-grpcio could not be installed (see $log); its interop tests will be skipped"
exit 0
