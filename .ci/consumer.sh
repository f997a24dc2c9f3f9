#!/usr/bin/env bash
# A consumer's view of the module: a fresh module that imports mha (with a
# replace to this checkout) must, after go mod tidy, have exactly cpuid and
# x/sys besides fastattn in its module graph, and keep its own go line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/go.mod" <<MOD
module example.com/consumer

go 1.22

require github.com/fastattn/fastattn v0.0.0

replace github.com/fastattn/fastattn => $root
MOD
cat >"$dir/main.go" <<'GO'
package main

import "github.com/fastattn/fastattn/mha"

func main() { _ = mha.Attention }
GO
cd "$dir"
export GOWORK=off GOFLAGS=-mod=mod
go mod tidy
go build ./...
got=$(go list -m -f '{{.Path}}' all | sort | tr '\n' ' ')
want="example.com/consumer github.com/fastattn/fastattn github.com/klauspost/cpuid/v2 golang.org/x/sys "
echo "module graph: $got"
if [ "$got" != "$want" ]; then
  echo "want exactly: $want"; exit 1
fi
goline=$(go mod edit -json | sed -n 's/.*"Go": "\(.*\)".*/\1/p')
echo "consumer go line after tidy: $goline"
[ "$goline" = "1.22" ] || { echo "go mod tidy raised the consumer's go line to $goline"; exit 1; }
