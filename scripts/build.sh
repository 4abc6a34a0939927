#!/usr/bin/env bash
# Configures and builds HMC into $1 (default: build) with extra CMake arguments after it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
mkdir -p "$dir"
cmake -S . -B "$dir" -G Ninja -DHMC_WERROR=ON "$@" >"$dir/configure.log" 2>&1 ||
  { cat "$dir/configure.log"; exit 1; }
grep -A15 "HMC .* configuration" "$dir/configure.log" | sed 's/^-- //'
ninja -C "$dir" ${HMC_BUILD_TARGETS:-} | grep -vE '^\[[0-9]+/[0-9]+\] (Building|Linking)' || true
test "${PIPESTATUS[0]}" -eq 0
