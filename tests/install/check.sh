#!/usr/bin/env bash
# `cmake --install` gives a usable package: the session examples built out of tree with
# find_package(hmc) talk to each other, and loopback_bandwidth builds with pkg-config alone.
#   check.sh <source dir> <build dir>
set -euo pipefail
src=$1 build=$2
work=$build/install-check  # fixed paths: reruns are incremental and ccache hits
rm -rf "$work/prefix"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
launcher=() compiler=(c++)
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache) compiler=(ccache c++); fi
cmake -S "$src/tests/install" -B "$work/app" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" "${launcher[@]}" \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/app" >"$work/build.log" 2>&1 || { tail -50 "$work/build.log"; exit 1; }

export PKG_CONFIG_PATH=$work/prefix/${HMC_LIBDIR:-lib}/pkgconfig
# shellcheck disable=SC2046 - pkg-config's output is meant to be split
"${compiler[@]}" "$src/examples/session/loopback_bandwidth.cpp" -o "$work/loopback" \
  $(pkg-config --cflags --libs hmc)

port=$((20000 + RANDOM % 20000))
"$work/app/put_get_server" 127.0.0.1 "$port" >"$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$work/server.log" && break; sleep 0.1; done
UCX_NET_DEVICES=lo "$work/app/put_get_client" 127.0.0.1 "$port" 1048576
wait $server
UCX_NET_DEVICES=lo "$work/loopback" 65536 20 4 shm event | grep -c RESULT
echo "1 passed, 0 failed"
