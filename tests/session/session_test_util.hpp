#pragma once
// Helpers for Session tests: deterministic byte patterns and a connected server/client pair.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "hmc/session.hpp"

namespace hmc::test {

// A byte pattern that differs for every (seed, index): stale or misplaced bytes never match.
inline std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> v(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v[i] = static_cast<std::byte>(x >> 56);
  }
  return v;
}

inline void fill(ConnBuffer& b, std::size_t offset, std::size_t n, std::uint64_t seed) {
  const auto p = pattern(n, seed);
  b.write_from_cpu(p.data(), n, offset);
}

inline bool holds(const ConnBuffer& b, std::size_t offset, std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> got(n);
  b.read_to_cpu(got.data(), n, offset);
  return got == pattern(n, seed);
}

inline std::string temp_dir() {
  char tmpl[] = "/tmp/hmc-session-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  return d ? d : "/tmp";
}

inline SessionOptions session_options(const std::string& tls, runtime::ProgressMode mode, std::size_t buffer,
                                      const std::string& uds_dir) {
  SessionOptions o;
  o.buffer_size = buffer;
  o.ucx_tls = tls;
  o.ucx_net_devices = "lo";  // keep UCX's tcp traffic on loopback
  o.progress_mode = mode;
  o.timeout = std::chrono::seconds(20);
  o.ctrl.uds_dir = uds_dir;
  return o;
}

}  // namespace hmc::test
