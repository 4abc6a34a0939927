#pragma once
// A flood of connections that never authenticate, against a server on 127.0.0.1:port: 500 of
// garbage, then 200 held open with one byte sent on each, and from then on (until stop()) either
// each one the server closes is opened again (reopen) or a new one-byte connection replaces the
// oldest held one as fast as one thread can (churn). The connections come from `sources` in turn
// (loopback addresses: 127.0.0.2 is another source to the server).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace hmc::test {

class Flood {
 public:
  static constexpr int kGarbage = 500, kHeld = 200;
  enum class Mode { reopen, churn };

  Flood(std::uint16_t port, std::vector<std::string> sources, Mode mode) : port_(port), sources_(std::move(sources)) {
    std::mt19937 rng(3);
    std::vector<char> junk(256);
    for (int i = 0; i < kGarbage; ++i) {
      for (auto& b : junk) b = static_cast<char>(rng());
      const int fd = open();
      if (fd >= 0) {
        [[maybe_unused]] auto n = ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
        ::close(fd);
      }
    }
    for (int i = 0; i < kHeld; ++i) held_.push_back(open_one_byte());
    setup_failures_ = failures_.load();
    thread_ = std::thread([this, mode] {
      while (!stop_) {
        if (mode == Mode::reopen) {
          reopen_closed();
          continue;
        }
        held_.push_back(open_one_byte());
        close_fd(held_.front());
        held_.pop_front();
      }
    });
  }
  ~Flood() { stop(); }
  Flood(const Flood&) = delete;
  Flood& operator=(const Flood&) = delete;

  // Connections of the first 700 that could not be opened (the flood would be smaller than it says).
  int setup_failures() const { return setup_failures_; }

  // Ends the flood and closes what it holds; returns how many connections it opened in all.
  int stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (int fd : held_) close_fd(fd);
    held_.clear();
    return opened_;
  }

 private:
  int open() {
    const std::string& source = sources_[static_cast<std::size_t>(opened_++) % sources_.size()];
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      ++failures_;
      return -1;
    }
    const int one = 1;  // the port is picked at connect(), per destination: no bind-time exhaustion
    ::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port_);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
        ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      ::close(fd);
      ++failures_;
      return -1;
    }
    return fd;
  }
  // Opens again each held connection the server closed (or failed to open), within 10 ms.
  void reopen_closed() {
    std::vector<pollfd> fds;
    for (int fd : held_) fds.push_back(pollfd{fd, POLLIN, 0});
    const bool all_open = std::find(held_.begin(), held_.end(), -1) == held_.end();
    if (::poll(fds.data(), fds.size(), 10) <= 0 && all_open) return;
    char buf[512];
    for (std::size_t i = 0; i < held_.size(); ++i) {
      if (held_[i] >= 0 && fds[i].revents == 0) continue;
      if (held_[i] >= 0 && ::recv(held_[i], buf, sizeof buf, MSG_DONTWAIT) > 0) continue;  // a REJECT: EOF follows
      close_fd(held_[i]);
      held_[i] = open_one_byte();
    }
  }
  int open_one_byte() {
    const int fd = open();
    if (fd >= 0) {
      [[maybe_unused]] auto n = ::send(fd, "\x01", 1, MSG_NOSIGNAL);
    }
    return fd;
  }
  static void close_fd(int fd) {
    if (fd >= 0) ::close(fd);
  }

  std::uint16_t port_;
  std::vector<std::string> sources_;
  std::deque<int> held_;
  std::atomic<bool> stop_{false};
  std::atomic<int> opened_{0};
  std::atomic<int> failures_{0};
  int setup_failures_ = 0;
  std::thread thread_;
};

inline void PrintTo(Flood::Mode m, std::ostream* os) { *os << (m == Flood::Mode::reopen ? "reopen" : "churn"); }

}  // namespace hmc::test
