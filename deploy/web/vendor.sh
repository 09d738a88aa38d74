#!/usr/bin/env bash
# Vendor the status page's one front-end library from the npm registry (no CDN at run time):
# uPlot (MIT), pinned, checked against the integrity hash npm publishes, copied into the package.
#   deploy/web/vendor.sh            # refresh stream_dedup/stream/web/vendor/
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=1.6.32
OUT=stream_dedup/stream/web/vendor
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
command -v npm >/dev/null || { echo "vendor.sh: npm is needed (Node.js from the machine or Debian's nodejs)" >&2; exit 3; }
(cd "$tmp" && npm pack "uplot@$VERSION" --silent >/dev/null)
want=$(npm view "uplot@$VERSION" dist.integrity)
got="sha512-$(openssl dgst -sha512 -binary "$tmp/uplot-$VERSION.tgz" | base64 -w0)"
[ "$want" = "$got" ] || { echo "vendor.sh: integrity mismatch for uplot@$VERSION" >&2; exit 1; }
tar xzf "$tmp/uplot-$VERSION.tgz" -C "$tmp"
mkdir -p "$OUT"
cp "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" "$tmp/package/LICENSE" "$OUT/"
echo "uplot@$VERSION $want" > "$OUT/VERSION"
echo "vendored uplot@$VERSION into $OUT"
