#!/usr/bin/env bash
# ort.sh [--threads 1,2] [--shape "B,H,Hkv,Lq,Lk,D;..."] [--json]
#
# Times ONNX Runtime's CPU attention (onnxruntime-node, CPU execution
# provider) on the shapes `go run ./bench` uses, so the two can be compared
# side by side: run this and the bench one after the other, never at the
# same time, and compare ratios, not times from different sittings.
#
# Installs onnxruntime-node (its CPU binaries ship inside the npm package)
# into $ORT_DIR (default ~/.cache/fastattn-ort) on first use; needs node and
# npm (ONNXRUNTIME_NODE_INSTALL=skip: the CPU binaries are in the package,
# and its install script would fetch GPU ones from outside the registry).
# Nothing in the Go modules depends on it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${ORT_DIR:-$HOME/.cache/fastattn-ort}
version=${ORT_VERSION:-1.30.0}
if [ ! -f "$dir/node_modules/onnxruntime-node/package.json" ]; then
  mkdir -p "$dir"
  (cd "$dir" && { [ -f package.json ] || npm init -y >/dev/null; } &&
    ONNXRUNTIME_NODE_INSTALL=skip npm install --no-fund --no-audit --loglevel=error "onnxruntime-node@$version" >/dev/null)
fi
NODE_PATH="$dir/node_modules" exec node "$here/ort_attention.js" "$@"
