#!/usr/bin/env bash
# Runs every Fuzz target in the module for a short, bounded time (FUZZTIME, default 10s).
set -euo pipefail
fuzztime=${FUZZTIME:-10s}
for pkg in $(go list ./...); do
  for f in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    echo "fuzz $pkg $f ($fuzztime)"
    go test -run '^$' -fuzz "^${f}\$" -fuzztime "$fuzztime" "$pkg"
  done
done
