#include "self_test.hpp"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "hmc/error.hpp"
#include "hmc/session.hpp"

namespace hmc::doctor {

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Python's round(x, digits) for the figures the report prints.
double rounded(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(x * scale) / scale;
}

// A private directory for the sessions' Unix sockets ($TMPDIR, else /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/hmc-doctor-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
      throw Error(Status::ERROR,
                  "cannot create a temporary directory " + pattern + ": " + std::generic_category().message(errno));
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

SelfTestResult run_self_test(std::size_t size) {
  const TempDir dir;
  SessionOptions options;
  options.buffer_size = size;
  options.ctrl.uds_dir = dir.path();
  options.timeout = 20s;
  Session server(options);
  Session client(options);
  const auto started = Clock::now();
  server.init_server("127.0.0.1", 0);
  const std::uint32_t peer = client.connect("127.0.0.1", server.ctrl_port(), ConnType::UCX, 20s);
  const double connect_s = seconds_since(started);
  std::vector<double> small;
  for (int i = 0; i < 200; ++i) {
    const auto t = Clock::now();
    client.put(peer, 0, 0, 64);
    small.push_back(seconds_since(t));
  }
  constexpr int kRounds = 5;
  const auto t = Clock::now();
  for (int i = 0; i < kRounds; ++i) client.put(peer, 0, 0, size);
  const double secs = seconds_since(t);
  std::sort(small.begin(), small.end());
  SelfTestResult result;
  result.transports = client.transports(peer);
  result.connect_ms = rounded(connect_s * 1e3, 1);
  result.put_64B_p50_us = rounded(small[small.size() / 2] * 1e6, 2);
  result.put_bandwidth_GBps = rounded(kRounds * static_cast<double>(size) / secs / 1e9, 2);
  result.put_bytes = size;
  return result;
}

std::vector<MemoryType> native_memory_types() {
  SessionOptions options;
  options.buffer_size = std::size_t{1} << 20;
  Session session(options);
  return session.native_memory_types();
}

}  // namespace hmc::doctor
