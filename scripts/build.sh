#!/usr/bin/env bash
# Configures and builds HMC into $1 (default: build) with extra CMake arguments after it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
mkdir -p "$dir"
# ccache (when installed) makes rebuilds and the second build of scripts/test cheap; paths under
# the checkout are hashed relative to it, so clones and worktrees share the cache.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  # The runtime's precompiled header (-include cmake_pch.hxx): without this sloppiness ccache
  # refuses every compile that uses it ("could not use precompiled header"), i.e. nearly all.
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# lld links the test programs (large, with debug info) in under half the CPU time of ld.bfd.
linker=()
if command -v ld.lld >/dev/null; then
  linker=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld
          -DCMAKE_MODULE_LINKER_FLAGS=-fuse-ld=lld)
fi
cmake -S . -B "$dir" -G Ninja -DHMC_WERROR=ON "${launcher[@]}" "${linker[@]}" "$@" >"$dir/configure.log" 2>&1 ||
  { cat "$dir/configure.log"; exit 1; }
grep -A15 "HMC .* configuration" "$dir/configure.log" | sed 's/^-- //'
# ninja's status, not grep's: with pipefail a `|| true` here would hide a failed build.
set +o pipefail
ninja -C "$dir" ${HMC_BUILD_TARGETS:-} | { grep -vE '^\[[0-9]+/[0-9]+\] (Building|Linking)' || true; }
status=${PIPESTATUS[0]}
set -o pipefail
exit "$status"
