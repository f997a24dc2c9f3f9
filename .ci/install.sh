#!/usr/bin/env bash
# A new user's first minutes, as the README says them: in a fresh module,
# the README's install line (read from README.md), then the README's
# example program, built and run — on the current Go and on the oldest the
# go.mod allows. The module is served from a local module proxy made from
# this checkout (git archive HEAD, as a tag's zip would hold it), ahead of
# the real proxy that serves cpuid and x/sys, so `go get` resolves it as it
# will once the module is published.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v zip >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq zip >/dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

install=$(sed -n '/^## Install/,/^## /{/^go get /p}' "$root/README.md" | head -1)
case "$install" in
  "go get github.com/fastattn/fastattn/"*) echo "README install line: $install" ;;
  *) echo "README.md has no 'go get github.com/fastattn/fastattn/...' line under ## Install (found '$install')"; exit 1 ;;
esac

# The proxy: list, .info, .mod and .zip of one version; nested modules
# (bench, gen) and the workspace are not part of the module's zip.
version=v0.0.0-ci
mod="$work/proxy/github.com/fastattn/fastattn/@v"
mkdir -p "$mod" "$work/zip/github.com/fastattn/fastattn@$version"
git -C "$root" archive HEAD | tar -x -C "$work/zip/github.com/fastattn/fastattn@$version"
(cd "$work/zip/github.com/fastattn/fastattn@$version" && rm -rf bench gen go.work go.work.sum)
(cd "$work/zip" && zip -qr "$mod/$version.zip" "github.com/fastattn/fastattn@$version")
cp "$root/go.mod" "$mod/$version.mod"
printf '{"Version":"%s","Time":"2026-01-01T00:00:00Z"}\n' "$version" >"$mod/$version.info"
echo "$version" >"$mod/list"

# The README's first Go program.
awk '/^```go$/{on=1; next} /^```$/{if (on) exit} on' "$root/README.md" >"$work/main.go"
grep -q '^package main' "$work/main.go" || { echo "README.md's first go block is not a program"; exit 1; }

minimum=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$root/go.mod")
for toolchain in local "go${minimum}.0"; do
  dir="$work/user-$toolchain"
  mkdir -p "$dir"
  cp "$work/main.go" "$dir/"
  (
    cd "$dir"
    export GOWORK=off GOFLAGS= GOTOOLCHAIN="$toolchain" GONOSUMDB=github.com/fastattn/fastattn
    export GOPROXY="file://$work/proxy,${GOPROXY:-https://proxy.golang.org}"
    printf 'module example.com/firsthour\n\ngo %s\n' "$minimum" >go.mod
    echo "--- $(go version): $install"
    $install
    go build -o firsthour .
    ./firsthour
  )
done
