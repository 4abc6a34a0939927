#pragma once
// Helpers for control-channel tests: a temp dir per test, a raw blocking socket that can speak the
// handshake, a log capture.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "ctrl/ctrl_frame.hpp"
#include "ctrl/ctrl_handshake.hpp"
#include "hmc/runtime/log.hpp"

namespace hmc::test {

// The tag count of the long in-order streams. ASan at -O0 runs the same per-tag path 60-100x slower
// (1-2 s became 70-140 s): a tenth of the volume there (docs/testing.md, "CI time").
#if defined(__SANITIZE_ADDRESS__)
inline constexpr std::uint64_t kManyTags = 10'000;
#else
inline constexpr std::uint64_t kManyTags = 100'000;
#endif

// Tests never touch the real ~/.hmc: the key file is the build tree's (this process and its children).
#if defined(HMC_TEST_KEY_FILE)
inline const int kUseTestKeyFile = ::setenv("HMC_AUTH_KEY_FILE", HMC_TEST_KEY_FILE, 0);
#endif

inline std::vector<std::byte> key_bytes(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

inline std::string make_temp_dir() {
  char tmpl[] = "/tmp/hmc-test-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  return d ? std::string(d) : std::string("/tmp");
}

// A plain blocking socket, to send what a well-behaved peer never would.
class RawSocket {
 public:
  static RawSocket tcp(std::uint16_t port) {
    RawSocket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s.connected_ = ::connect(s.fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    return s;
  }
  // From `source`, a loopback address such as 127.0.0.2: the server sees another source address.
  static RawSocket tcp_from(const std::string& source, std::uint16_t port) {
    RawSocket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    if (::bind(s.fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) return s;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s.connected_ = ::connect(s.fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    return s;
  }
  static RawSocket uds(const std::string& path) {
    RawSocket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    s.connected_ = ::connect(s.fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    return s;
  }
  static RawSocket adopt(int fd) {
    RawSocket s(fd);
    s.connected_ = fd >= 0;
    return s;
  }
  RawSocket(RawSocket&& o) noexcept : fd_(o.fd_), connected_(o.connected_) { o.fd_ = -1; }
  RawSocket& operator=(RawSocket&& o) noexcept {
    std::swap(fd_, o.fd_);
    std::swap(connected_, o.connected_);
    return *this;
  }
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  int last_errno = 0;
  bool send(const void* data, std::size_t n) { return ::send(fd_, data, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n); }
  bool send(const std::vector<std::byte>& v) { return send(v.data(), v.size()); }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  int fd() const { return fd_; }

  // Reads one whole frame within 5 s; false on close, timeout or a malformed header.
  bool read_frame(detail::Frame& f) {
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    detail::HeaderBytes hb;
    if (!read_exact(hb.data(), hb.size())) return false;
    if (!detail::decode_header(hb, 1u << 30, f.header).empty()) return false;
    f.payload.resize(f.header.length);
    return read_exact(f.payload.data(), f.payload.size());
  }
  // Reads frames until one that is not a heartbeat.
  bool read_data_frame(detail::Frame& f) {
    while (read_frame(f))
      if (f.header.type != detail::FrameType::heartbeat) return true;
    return false;
  }

  // The client side of the handshake with `key`; the frames sent are appended to `sent` (for a
  // replay). Returns the server's answer: WELCOME when the key is right, REJECT otherwise.
  detail::Frame handshake(const std::vector<std::byte>& key, std::uint32_t rank, std::vector<std::byte>* sent = nullptr,
                          bool authenticate = true) {
    detail::HelloMsg hello;
    hello.rank = rank;
    hello.nonce = detail::random_nonce();
    detail::ClientHandshake hs(key, authenticate, hello);
    auto out = [&](const std::vector<std::byte>& frame) {
      send(frame);
      if (sent) sent->insert(sent->end(), frame.begin(), frame.end());
    };
    out(hs.hello_frame());
    detail::Frame f;
    while (read_frame(f)) {
      const auto step = hs.on_frame(f.header.type, f.payload);
      if (step.what != detail::HandshakeStep::What::reply) return f;
      out(step.reply);
    }
    return detail::Frame{};
  }

 private:
  bool read_exact(std::byte* p, std::size_t n) {
    while (n > 0) {
      const ssize_t r = ::recv(fd_, p, n, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      p += r;
      n -= static_cast<std::size_t>(r);
    }
    return true;
  }

 public:
  // Reads until the peer closes (true) or 5 s pass (false); the bytes read go to `got`.
  bool read_until_closed(std::vector<std::byte>& got) {
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::byte buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0) return true;
      if (n < 0) {
        if (errno == EINTR) continue;
        last_errno = errno;
        return errno == ECONNRESET;
      }
      got.insert(got.end(), buf, buf + n);
    }
  }

 private:
  explicit RawSocket(int fd) : fd_(fd) {}
  int fd_;
  bool connected_ = false;
};

// Captures HMC log lines through the user log hook while alive.
class LogCapture {
 public:
  LogCapture() {
    runtime::set_log_hook([this](runtime::LogLevel level, std::string_view msg) {
      std::lock_guard<std::mutex> lock(mutex_);
      lines_.emplace_back(level, std::string(msg));
    });
  }
  ~LogCapture() { runtime::set_log_hook({}); }
  bool has_error_containing(const std::string& text) { return count_errors_containing(text) != 0; }
  int count_errors_containing(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    int n = 0;
    for (const auto& [level, line] : lines_)
      if (level == runtime::LogLevel::error && line.find(text) != std::string::npos) ++n;
    return n;
  }
  bool has_line_containing(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [level, line] : lines_)
      if (line.find(text) != std::string::npos) return true;
    return false;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<runtime::LogLevel, std::string>> lines_;
};

}  // namespace hmc::test
