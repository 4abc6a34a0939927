#pragma once
// Helpers for control-channel tests: a temp dir per test, a raw blocking socket, a log capture.
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "hmc/runtime/log.hpp"

namespace hmc::test {

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
  static RawSocket uds(const std::string& path) {
    RawSocket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    s.connected_ = ::connect(s.fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    return s;
  }
  RawSocket(RawSocket&& o) noexcept : fd_(o.fd_), connected_(o.connected_) { o.fd_ = -1; }
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  int last_errno = 0;
  bool send(const void* data, std::size_t n) { return ::send(fd_, data, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n); }
  bool send(const std::vector<std::byte>& v) { return send(v.data(), v.size()); }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
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
  bool has_error_containing(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [level, line] : lines_)
      if (level == runtime::LogLevel::error && line.find(text) != std::string::npos) return true;
    return false;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<runtime::LogLevel, std::string>> lines_;
};

}  // namespace hmc::test
