#pragma once
// What a session has done since it started (Session::stats()): plain numbers, read on demand.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hmc {

// Operations of one kind that ended. Latency is sampled: one operation in kSampleEvery is timed
// (two clock reads on every operation would cost an 8-byte put ~10 %), and bucket i counts the
// sampled ones that took under 2^i microseconds, the last bucket everything longer.
struct OpStats {
  static constexpr std::size_t kBuckets = 24;
  static constexpr std::uint64_t kSampleEvery = 16;
  std::uint64_t done = 0;
  std::uint64_t bytes = 0;  // moved by the operations done
  std::uint64_t failed = 0;
  std::uint64_t timed_out = 0;
  std::uint64_t aborted = 0;  // their peer was lost, or the session closed
  std::array<std::uint64_t, kBuckets> latency_us{};
  std::uint64_t latency_sum_us = 0;  // of the sampled operations

  // The bucket bound (us) under which fraction `q` of the sampled operations ended; 0 without samples.
  double latency_quantile_us(double q) const noexcept;
  OpStats& operator+=(const OpStats& other) noexcept;
};

// A connected peer: what went to and came from it over the data transport.
struct PeerStats {
  std::uint32_t rank = 0;
  std::string transport;  // as Session::transports(rank)
  std::uint64_t put_bytes = 0;
  std::uint64_t get_bytes = 0;
  std::uint64_t message_bytes = 0;  // control messages sent over the data transport
  std::uint64_t done = 0;           // operations
  std::uint64_t failed = 0;         // failed, timed out or aborted
};

// The control channel's own sockets (not the data transport): its messages, and the handshakes it
// refused as a server, by reason.
struct CtrlStats {
  std::uint64_t messages_sent = 0;  // tags and messages, counted once the kernel has them
  std::uint64_t bytes_sent = 0;
  std::uint64_t messages_received = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t refused_auth = 0;       // a proof or TLS handshake that failed, or a foreign uid
  std::uint64_t refused_rank = 0;       // a rank already connected, or the server's own
  std::uint64_t refused_busy = 0;       // too many connections or handshakes (evictions too)
  std::uint64_t refused_protocol = 0;   // malformed or unexpected frames
  std::uint64_t refused_transport = 0;  // a data transport this side does not serve
  std::uint64_t refused_timeout = 0;    // no complete handshake within hello_timeout
};

// Device memory the data transport cannot move itself goes through pinned host buffers.
struct StagingStats {
  std::uint64_t copies = 0;  // between device memory and pinned host memory, either way
  std::uint64_t bytes = 0;
};

struct SessionStats {
  // By kind. put_batch and get_batch include put_blocks and get_blocks; put_notify every put or
  // batch with a notify; message the control messages that went over the data transport.
  OpStats put, get, put_batch, get_batch, put_notify, message;
  std::uint64_t in_flight = 0;  // operations not ended yet
  std::uint64_t peers_connected = 0;
  std::uint64_t peers_lost = 0;  // since the session started
  std::vector<PeerStats> peers;  // the connected ones, by rank
  CtrlStats ctrl;
  StagingStats staging;
};

}  // namespace hmc
