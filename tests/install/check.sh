#!/usr/bin/env bash
# `cmake --install` gives a usable package on a machine without CUDA or HIP: the README's CMake lines
# build a program out of tree with nothing else set (no C++ standard), the session examples linked
# to hmc::hmc_shared talk to each other, the README's pkg-config line builds too, and bin/hmc_doctor runs.
#   check.sh <source dir> <build dir>
set -euo pipefail
src=$1 build=$2
work=$build/install-check  # fixed paths: reruns are incremental and ccache hits
rm -rf "$work/prefix"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
lib=$work/prefix/${HMC_LIBDIR:-lib}

# The package names no GPU runtime: hmc opens it at run time where one exists.
if grep -rilE "cuda|amdhip" "$lib/cmake/hmc" "$lib/pkgconfig"; then echo "the installed package names a GPU runtime"; exit 1; fi
if readelf -d "$lib/libhmc_shared.so" | grep -iE "NEEDED.*(cudart|amdhip)"; then echo "libhmc_shared.so needs a GPU runtime"; exit 1; fi

# The README's lines, verbatim: the cmake block under "In your own project".
sed -n '/^In your own project/,/^```$/p' "$src/README.md" | sed '1,/^```cmake$/d; /^```$/d' >"$work/readme_lines.cmake"
grep -q "find_package(hmc" "$work/readme_lines.cmake" || { echo "no CMake block found in README.md"; exit 1; }
cat "$work/readme_lines.cmake"

launcher=() compiler=(c++)
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache) compiler=(ccache c++); fi
# No CUDA toolkit for the user's project, even where this machine has one.
cmake -S "$src/tests/install" -B "$work/app" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" "${launcher[@]}" \
  -DREADME_LINES="$work/readme_lines.cmake" -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/app" >"$work/build.log" 2>&1 || { tail -50 "$work/build.log"; exit 1; }

export PKG_CONFIG_PATH=$lib/pkgconfig
# shellcheck disable=SC2046 - pkg-config's output is meant to be split
"${compiler[@]}" "$src/examples/session/loopback_bandwidth.cpp" -o "$work/loopback" \
  $(pkg-config --cflags --libs hmc)

port=$((20000 + RANDOM % 20000))
"$work/app/put_get_server" 127.0.0.1 "$port" >"$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$work/server.log" && break; sleep 0.1; done
UCX_NET_DEVICES=lo "$work/app/put_get_client" 127.0.0.1 "$port" 1048576
# The server's own failure (its exit status and log) is what a red run needs to show.
status=0
wait $server || status=$?
if [ "$status" -ne 0 ]; then
  echo "put_get_server exited with status $status; its log:"
  cat "$work/server.log"
  exit 1
fi
# Through a file: with pipefail, grep -q leaving early can kill ldd with SIGPIPE and fail the run.
ldd "$work/app/put_get_client" >"$work/ldd.txt"
grep -q libhmc_shared.so "$work/ldd.txt" || { echo "put_get_client does not load libhmc_shared.so:"; cat "$work/ldd.txt"; exit 1; }
# hmc_doctor is installed and runs from the prefix.
"$work/prefix/bin/hmc_doctor" --help >"$work/doctor-help.txt"
grep -q -- "--expect" "$work/doctor-help.txt" || { echo "bin/hmc_doctor --help:"; cat "$work/doctor-help.txt"; exit 1; }
for program in "$work/app/app" "$work/loopback"; do
  UCX_NET_DEVICES=lo "$program" 65536 20 4 shm event | grep -c RESULT
done
echo "1 passed, 0 failed"
