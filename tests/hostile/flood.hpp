#pragma once
// A flood of connections that never authenticate, against a server on 127.0.0.1:port: 500 of
// garbage, then 200 held open with one byte sent on each, and from then on (until stop()) a new
// one-byte connection replacing the oldest held one, as fast as one thread can. The connections
// come from `sources` in turn (loopback addresses: 127.0.0.2 is another source to the server).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace hmc::test {

class Flood {
 public:
  static constexpr int kGarbage = 500, kHeld = 200;

  Flood(std::uint16_t port, std::vector<std::string> sources) : port_(port), sources_(std::move(sources)) {
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
    thread_ = std::thread([this] {
      while (!stop_) {
        held_.push_back(open_one_byte());
        close_fd(held_.front());
        held_.pop_front();
      }
    });
  }
  ~Flood() { stop(); }
  Flood(const Flood&) = delete;
  Flood& operator=(const Flood&) = delete;

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
    if (fd < 0) return -1;
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
      return -1;
    }
    return fd;
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
  std::thread thread_;
};

}  // namespace hmc::test
