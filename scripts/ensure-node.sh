#!/usr/bin/env bash
# Makes Node.js >= 24 available as .tools/node/bin/node without touching the machine:
# when the machine's node is older (or absent), Node 24 is fetched from the npm registry
# (package node-linux-<arch>, which ships the official binary) into the project.
set -euo pipefail
cd "$(dirname "$0")/.."
want_major=24
pinned=24.21.0
target=.tools/node

major_of() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

if [ -x "$target/bin/node" ] && [ "$(major_of "$target/bin/node")" -ge "$want_major" ]; then exit 0; fi
if command -v node >/dev/null && [ "$(major_of node)" -ge "$want_major" ]; then
  mkdir -p "$target/bin" && ln -sf "$(command -v node)" "$target/bin/node"; exit 0
fi
command -v npm >/dev/null || { echo "ensure-node: npm is needed to fetch Node $want_major" >&2; exit 1; }
case "$(uname -m)" in
  x86_64) arch=x64 ;; aarch64|arm64) arch=arm64 ;; *) echo "ensure-node: unsupported arch $(uname -m)" >&2; exit 1 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "ensure-node: fetching Node $pinned (node-linux-$arch) from the npm registry into $target" >&2
( cd "$tmp" && { npm pack --silent "node-linux-$arch@$pinned" >/dev/null 2>&1 || npm pack --silent "node-linux-$arch@$want_major" >/dev/null; } )
tar -xzf "$tmp"/node-linux-"$arch"-*.tgz -C "$tmp"
rm -rf "$target" && mkdir -p .tools && mv "$tmp/package" "$target"
"$target/bin/node" --version >&2
