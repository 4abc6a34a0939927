#pragma once
// Command line of hmc_bench.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hmc/runtime/progress_mode.hpp"
#include "hmc/session.hpp"

namespace hmc::bench {

struct Options {
  std::string role = "loopback";  // loopback (spawns the server), server, client
  std::string host = "127.0.0.1";
  std::uint16_t port = 18900;  // control port of the server
  std::vector<std::string> tests{"put_bw", "get_bw", "put_lat", "get_lat", "batch", "pipeline"};
  std::vector<std::size_t> sizes{8, 64, 512, 4096, 32768, 65536, 262144, 1u << 20, 4u << 20, 16u << 20, 64u << 20};
  std::size_t depth = 16;   // operations in flight (bw tests), segments (batch), blocks (kv), window (pipeline)
  std::uint32_t peers = 1;  // clients started by loopback, each its own process
  runtime::ProgressMode mode = runtime::ProgressMode::adaptive;  // the Session default
  ProgressThread progress_thread = ProgressThread::own;          // the client's; servers keep their own thread
  std::string progress_thread_name = "default";                  // as given; "default": the Session's default
  std::string tls;                                               // UCX_TLS for both sides; empty: UCX default
  std::string net_devices = "lo";
  long iters = 0;                 // 0: chosen per size
  long warmup = 0;                // 0: chosen per size
  std::uint32_t rank = 1;         // client rank
  std::uint32_t server_rank = 0;  // the server's rank (loopback: 100, 101, ... one per peer)
  std::string json, csv;
  bool quiet = false;
  std::string self;  // argv[0], to spawn the server in loopback mode

  static std::string usage();
};

// Throws std::invalid_argument with a message naming the bad flag.
Options parse_options(int argc, char** argv);

}  // namespace hmc::bench
