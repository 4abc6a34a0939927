#pragma once
// The loopback self-test: two Sessions in this process over the transports UCX picks, what carries
// a put between them, and how fast.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hmc/memory_type.hpp"

namespace hmc::doctor {

struct SelfTestResult {
  std::string transports;  // Session::transports, e.g. "posix,cma" or "tcp"
  double connect_ms = 0;
  double put_64B_p50_us = 0;
  double put_bandwidth_GBps = 0;
  std::uint64_t put_bytes = 0;
};

// A server and a client session with `size`-byte buffers and their Unix sockets in a temporary
// directory: connect time, the median of 200 puts of 64 B, 5 puts of `size` bytes. Throws what
// the sessions throw (hmc::Error) and std::bad_alloc.
SelfTestResult run_self_test(std::size_t size);

// The memory types a session's transport moves itself (Session::native_memory_types).
std::vector<MemoryType> native_memory_types();

}  // namespace hmc::doctor
