// A hostile "etcd": every reply is valid HTTP carrying a huge JSON document of tiny elements.
// The client must refuse it with a typed error, its memory growing in proportion to the bytes
// received, not to the elements they hold (30 M elements in 64 MiB took a client to 1.5 GiB).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "hmc/error.hpp"
#include "hmc/store/store.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;

// Starts the peak below from the current resident memory (the reply built above stays out of it).
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// The process's peak resident memory so far (VmHWM), in bytes.
std::size_t peak_rss() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// Answers every request on a loopback port with `body` as an HTTP 200 JSON reply.
class HostileEtcd {
 public:
  explicit HostileEtcd(std::string body) : body_(std::move(body)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("hostile etcd: cannot listen");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~HostileEtcd() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    for (auto& t : connections_) t.join();
    ::close(fd_);
  }
  std::string url() const { return "etcd://127.0.0.1:" + std::to_string(port_); }

 private:
  void serve() {
    while (!stop_) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      connections_.emplace_back([this, c] { answer(c); });
    }
  }

  // One connection: whatever was asked, the same reply, then the client's remaining bytes read
  // until it closes (closing with unread bytes would reset the connection under the reply).
  void answer(int c) {
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(body_.size()) + "\r\nConnection: close\r\n\r\n";
    char req[4096];
    timeval limit{5, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    (void)::recv(c, req, sizeof req, 0);
    bool ok = ::send(c, head.data(), head.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(head.size());
    for (std::size_t at = 0; ok && at < body_.size();) {
      const ssize_t n = ::send(c, body_.data() + at, body_.size() - at, MSG_NOSIGNAL);
      ok = n > 0;
      at += ok ? static_cast<std::size_t>(n) : 0;
    }
    ::shutdown(c, SHUT_WR);
    while (::recv(c, req, sizeof req, 0) > 0) {
    }
    ::close(c);
  }

  std::string body_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> connections_;  // the accept thread's only
};

TEST(EtcdHostile, AReplyOfMillionsOfTinyElementsIsRefusedWithoutAmplification) {
  constexpr std::size_t kReply = 32u << 20;
  std::string body = "{\"header\":[";
  while (body.size() < kReply - 2) body += "0,";
  body += "0]}";
  HostileEtcd etcd(std::move(body));
  StoreOptions o;
  o.job_id = "hostile";
  o.timeout = 20s;
  reset_peak_rss();
  const std::size_t before = peak_rss();
  try {
    Store refused(etcd.url(), o);
    ADD_FAILURE() << "a reply of 16 M elements was accepted";
  } catch (const Error& e) {
    std::printf("refused: %s\n", e.what());
  }
  const std::size_t grew = peak_rss() - before;
  std::printf("peak RSS grew by %.1f MiB for a %.0f MiB reply\n", static_cast<double>(grew) / (1 << 20),
              static_cast<double>(kReply) / (1 << 20));
  // The reply's bytes are held once (with room to grow); its 16 M elements are never built.
  EXPECT_LT(grew, 3 * kReply) << "peak RSS grew by " << (grew >> 20) << " MiB for a " << (kReply >> 20) << " MiB reply";
}

}  // namespace
}  // namespace hmc
