#!/usr/bin/env bash
# Builds deploy/Containerfile without any image registry: the test suite's image build
# (test/deploy/image.test.ts), usable by hand the same way.
#
#   scripts/local-image.sh base    the local base image (Debian + Node 24 + npm), built once and
#                                  cached; prints its name. `make test-peers` runs it.
#   scripts/local-image.sh has-base  exits 0 when the base of the current recipe is there
#   scripts/local-image.sh build   the base, then the Containerfile's every step on it with
#                                  buildah; prints the built image's name (localhost/authority:test)
#
# The base stands in for docker.io/library/node:24-slim (the Containerfile's default BASE_IMAGE)
# and is made of the same parts: Debian bookworm (debootstrap --variant=minbase from the Debian
# mirror), the official Node binary of the version scripts/ensure-node.sh pins (npm package
# node-linux-<arch>) in /usr/local/bin, and the npm that Node release bundles (npm package npm).
# Its tag is a hash of this recipe and those versions: a change to any of them builds a new base.
#
# Images live in the project (.tools/containers, storage driver vfs, which needs no kernel
# overlay support); nothing is written to the machine's own container storage. Needs root,
# debootstrap and buildah (Debian packages; scripts/ensure-test-peers.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

DEBIAN_SUITE=bookworm
DEBIAN_MIRROR=${LOCAL_IMAGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
NODE_VERSION=$(sed -n 's/^pinned=//p' scripts/ensure-node.sh)
NPM_VERSION=11.19.0 # the npm Node $NODE_VERSION bundles (its CHANGELOG: "upgrade npm to 11.19.0")
IMAGE=localhost/authority:test
STORE=(--root "$root/.tools/containers/storage" --runroot "$root/.tools/containers/run" --storage-driver vfs)

case "$(uname -m)" in
  x86_64) node_arch=x64 ;; aarch64 | arm64) node_arch=arm64 ;; *) echo "local-image: unsupported arch $(uname -m)" >&2; exit 1 ;;
esac

buildah_() { buildah "${STORE[@]}" "$@"; }

# The recipe: a root file system in a fresh container, committed as the base image.
build_base() {
  local name=$1 tmp container mnt
  tmp=$(mktemp -d)
  container=$(buildah_ from scratch)
  trap 'buildah_ rm "$container" >/dev/null 2>&1 || true; rm -rf "$tmp"; trap - RETURN' RETURN
  mnt=$(buildah_ mount "$container")
  debootstrap --variant=minbase "$DEBIAN_SUITE" "$mnt" "$DEBIAN_MIRROR" >"$tmp/debootstrap.log" 2>&1 ||
    { tail -n 20 "$tmp/debootstrap.log" >&2; return 1; }
  rm -rf "$mnt"/var/cache/apt/archives/*.deb "$mnt"/var/lib/apt/lists/*
  (cd "$tmp" && npm pack --silent "node-linux-$node_arch@$NODE_VERSION" "npm@$NPM_VERSION" >/dev/null)
  tar -xzf "$tmp/node-linux-$node_arch-$NODE_VERSION.tgz" -C "$tmp"
  install -m 0755 "$tmp/package/bin/node" "$mnt/usr/local/bin/node"
  mkdir -p "$mnt/usr/local/lib/node_modules/npm"
  tar -xzf "$tmp/npm-$NPM_VERSION.tgz" -C "$mnt/usr/local/lib/node_modules/npm" --strip-components=1
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$mnt/usr/local/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$mnt/usr/local/bin/npx"
  buildah_ config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env NODE_VERSION="$NODE_VERSION" --cmd node "$container"
  buildah_ commit --quiet "$container" "$name" >/dev/null
}

base_name() {
  local key
  key=$(printf '%s\n' "$(declare -f build_base)" "$DEBIAN_SUITE" "$DEBIAN_MIRROR" "$NODE_VERSION" \
    "$NPM_VERSION" "$node_arch" | sha256sum | cut -c1-16)
  echo "localhost/authority-base:$key"
}

ensure_base() {
  local name
  name=$(base_name)
  if ! buildah_ inspect --type image "$name" >/dev/null 2>&1; then
    echo "local-image: building $name (debootstrap $DEBIAN_SUITE, node $NODE_VERSION, npm $NPM_VERSION)" >&2
    # Bases of an older recipe, and the built images on them, are replaced, not kept.
    buildah_ rmi --all --force >/dev/null 2>&1 || true
    build_base "$name"
  fi
  echo "$name"
}

build_image() {
  local base args=()
  base=$(ensure_base)
  # Behind a TLS-intercepting proxy the machine names its CA bundle in NODE_EXTRA_CA_CERTS: the
  # build's npm gets it the same way, mounted for the build only (deploy/Containerfile).
  if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f "$NODE_EXTRA_CA_CERTS" ]; then
    args+=(--volume "$NODE_EXTRA_CA_CERTS:/run/authority-build-ca.crt:ro"
      --build-arg NODE_EXTRA_CA_CERTS=/run/authority-build-ca.crt)
  fi
  # Containers a killed run left behind (the test removes its own), so their images can go.
  buildah_ rm --all >/dev/null 2>&1 || true
  # chroot isolation: no user or network namespaces needed (the build uses the host's network).
  buildah_ bud --quiet --isolation chroot --pull=never --build-arg "BASE_IMAGE=$base" "${args[@]}" \
    --ignorefile deploy/Containerfile.dockerignore -f deploy/Containerfile -t "$IMAGE" . >&2
  # the previous build's image, now untagged
  buildah_ rmi --prune >/dev/null 2>&1 || true
  echo "$IMAGE"
}

case "${1:-}" in
  base) ensure_base ;;
  has-base) buildah_ inspect --type image "$(base_name)" >/dev/null 2>&1 ;;
  build) build_image ;;
  *) echo "usage: scripts/local-image.sh base|has-base|build" >&2; exit 2 ;;
esac
