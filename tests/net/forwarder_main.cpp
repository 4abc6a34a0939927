// An impairing frame forwarder for the network-fault tests: one direction per process.
//   hmc_net_forwarder --from IF --to IF [--delay-ms D] [--jitter-ms J] [--drop P] [--dup P]
//                     [--corrupt P] [--reorder P] [--reorder-ms R] [--queue N] [--seed S]
//                     [--max-seconds T] [--down]
// Reads every frame that arrives on `from` (AF_PACKET, promiscuous) and writes it out of `to`
// after the impairments: IPv4 frames are dropped, bit-flipped, duplicated, held back (reordered)
// and delayed with jitter; other frames (ARP, IPv6) only take the fixed delay. SIGUSR1 takes the
// link down (every frame dropped, queued ones too: a silent black hole), SIGUSR2 brings it back.
// Prints "READY" once it forwards, and one "STATS ..." line when it ends: after --max-seconds, or
// on SIGTERM/SIGINT. The test kernel has no sch_netem; this is the impairment path instead.
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <queue>
#include <random>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::microseconds;

struct Options {
  std::string from, to;
  double delay_ms = 0, jitter_ms = 0, drop = 0, dup = 0, corrupt = 0, reorder = 0, reorder_ms = 10;
  std::size_t queue = 20000;  // frames held at once; more are dropped (counted as overflow)
  std::uint64_t seed = 0;
  double max_seconds = 120;  // never outlive a test that forgot to stop it
  bool down = false;
};

struct Stats {
  std::uint64_t rx = 0, tx = 0, dropped = 0, corrupted = 0, duplicated = 0, reordered = 0, blackholed = 0, overflow = 0,
                send_errors = 0, non_ip = 0;
};

struct Frame {
  clock_type::time_point due;
  std::uint64_t seq;
  std::vector<unsigned char> bytes;
  bool operator>(const Frame& o) const { return due != o.due ? due > o.due : seq > o.seq; }
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "hmc_net_forwarder: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--down") {
      o.down = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "hmc_net_forwarder: %s needs a value\n", a.c_str());
      std::exit(2);
    }
    const char* v = argv[++i];
    if (a == "--from") o.from = v;
    else if (a == "--to") o.to = v;
    else if (a == "--delay-ms") o.delay_ms = std::atof(v);
    else if (a == "--jitter-ms") o.jitter_ms = std::atof(v);
    else if (a == "--drop") o.drop = std::atof(v);
    else if (a == "--dup") o.dup = std::atof(v);
    else if (a == "--corrupt") o.corrupt = std::atof(v);
    else if (a == "--reorder") o.reorder = std::atof(v);
    else if (a == "--reorder-ms") o.reorder_ms = std::atof(v);
    else if (a == "--queue") o.queue = std::strtoull(v, nullptr, 10);
    else if (a == "--seed") o.seed = std::strtoull(v, nullptr, 10);
    else if (a == "--max-seconds") o.max_seconds = std::atof(v);
    else {
      std::fprintf(stderr, "hmc_net_forwarder: unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.from.empty() || o.to.empty() || o.queue == 0) {
    std::fprintf(stderr, "usage: hmc_net_forwarder --from IF --to IF [impairments]\n");
    std::exit(2);
  }
  return o;
}

int interface_index(const std::string& name) {
  const unsigned idx = ::if_nametoindex(name.c_str());
  if (idx == 0) die("no interface " + name);
  return static_cast<int>(idx);
}

sockaddr_ll link_address(int ifindex, int protocol) {
  sockaddr_ll a{};
  a.sll_family = AF_PACKET;
  a.sll_protocol = static_cast<unsigned short>(htons(static_cast<std::uint16_t>(protocol)));
  a.sll_ifindex = ifindex;
  return a;
}

// Receives every frame the wire brings in on `name` (not the ones this host sends out of it).
int open_input(const std::string& name) {
  const int fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (fd < 0) die("socket(AF_PACKET)");
  const int one = 1;
  if (::setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0) die("PACKET_IGNORE_OUTGOING");
  const int rcvbuf = 8 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
  auto addr = link_address(interface_index(name), ETH_P_ALL);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) die("bind " + name);
  packet_mreq mr{};
  mr.mr_ifindex = addr.sll_ifindex;
  mr.mr_type = PACKET_MR_PROMISC;  // frames are addressed to the hosts on either side, not to us
  if (::setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) != 0) die("promiscuous " + name);
  return fd;
}

// Protocol 0: a send-only socket, so it never queues the traffic it is not meant to read.
int open_output(const std::string& name) {
  const int fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket(AF_PACKET)");
  const int sndbuf = 8 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf);
  auto addr = link_address(interface_index(name), 0);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) die("bind " + name);
  return fd;
}

std::uint64_t kernel_drops(int fd) {
  tpacket_stats st{};
  socklen_t len = sizeof st;
  return ::getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0 ? st.tp_drops : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  // Die with the test driver that started us, even if it is killed.
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) return 0;

  sigset_t sigs;
  sigemptyset(&sigs);
  for (int s : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT}) sigaddset(&sigs, s);
  if (::sigprocmask(SIG_BLOCK, &sigs, nullptr) != 0) die("sigprocmask");
  const int sfd = ::signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) die("signalfd");

  const int in = open_input(o.from);
  const int out = open_output(o.to);

  std::mt19937_64 rng(o.seed ? o.seed : static_cast<std::uint64_t>(clock_type::now().time_since_epoch().count()));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const auto ms = [](double v) {
    return std::chrono::duration_cast<clock_type::duration>(microseconds(static_cast<long long>(v * 1000.0)));
  };

  std::priority_queue<Frame, std::vector<Frame>, std::greater<>> queue;
  Stats st;
  bool down = o.down;
  std::uint64_t seq = 0;
  auto last_due = clock_type::now();
  const auto end = clock_type::now() + ms(o.max_seconds * 1000.0);
  std::vector<unsigned char> buf(65536);

  std::printf("READY from=%s to=%s down=%d\n", o.from.c_str(), o.to.c_str(), down ? 1 : 0);
  std::fflush(stdout);

  bool running = true;
  while (running) {
    auto now = clock_type::now();
    if (now >= end) break;
    auto wait = end - now;
    if (!queue.empty()) wait = std::min(wait, queue.top().due > now ? queue.top().due - now : clock_type::duration{});
    const int timeout_ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count());
    pollfd fds[2] = {{in, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (::poll(fds, 2, timeout_ms) < 0 && errno != EINTR) die("poll");

    signalfd_siginfo si;
    while (::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      if (si.ssi_signo == SIGUSR1) {
        down = true;
        st.blackholed += queue.size();
        queue = {};
      } else if (si.ssi_signo == SIGUSR2) {
        down = false;
      } else {
        running = false;
      }
    }

    // At most a burst per wake-up, so due frames go out on time under a flood.
    for (int burst = 0; burst < 512; ++burst) {
      sockaddr_ll from{};
      socklen_t flen = sizeof from;
      const ssize_t n = ::recvfrom(in, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &flen);
      if (n < 0) {
        // ENETDOWN: an interface was set down (the link-flap test); the socket works again once it is up.
        if (errno != EAGAIN && errno != EINTR && errno != ENETDOWN) die("recvfrom");
        break;
      }
      if (from.sll_pkttype == PACKET_OUTGOING) continue;
      ++st.rx;
      if (down) {
        ++st.blackholed;
        continue;
      }
      now = clock_type::now();
      Frame f{now + ms(o.delay_ms), seq++, std::vector<unsigned char>(buf.begin(), buf.begin() + n)};
      const bool ipv4 = n >= 34 && buf[12] == 0x08 && buf[13] == 0x00;
      if (!ipv4) {
        ++st.non_ip;
      } else {
        if (unit(rng) < o.drop) {
          ++st.dropped;
          continue;
        }
        if (unit(rng) < o.corrupt) {
          // One bit past the Ethernet header: the IP or TCP checksum must catch it, never the application.
          std::uniform_int_distribution<std::size_t> pos(ETH_HLEN, static_cast<std::size_t>(n) - 1);
          std::uniform_int_distribution<int> bit(0, 7);
          f.bytes[pos(rng)] ^= static_cast<unsigned char>(1u << bit(rng));
          ++st.corrupted;
        }
        if (o.jitter_ms > 0) f.due += ms((unit(rng) * 2.0 - 1.0) * o.jitter_ms);
      }
      // Jitter alone keeps the order; only --reorder lets later frames overtake.
      if (f.due < last_due) f.due = last_due;
      last_due = f.due;
      if (ipv4 && unit(rng) < o.reorder) {
        f.due += ms(o.reorder_ms);
        ++st.reordered;
      }
      const bool twice = ipv4 && unit(rng) < o.dup;
      for (int copy = 0; copy < (twice ? 2 : 1); ++copy) {
        if (queue.size() >= o.queue) {
          ++st.overflow;
          continue;
        }
        if (copy == 1) ++st.duplicated;
        queue.push(Frame{f.due, seq++, f.bytes});
      }
    }

    now = clock_type::now();
    while (!queue.empty() && queue.top().due <= now) {
      const auto& f = queue.top();
      if (::send(out, f.bytes.data(), f.bytes.size(), 0) < 0) ++st.send_errors;
      else ++st.tx;
      queue.pop();
    }
  }

  std::printf("STATS from=%s to=%s rx=%llu tx=%llu dropped=%llu corrupted=%llu duplicated=%llu reordered=%llu "
              "blackholed=%llu overflow=%llu send_errors=%llu non_ip=%llu kernel_drops=%llu\n",
              o.from.c_str(), o.to.c_str(), static_cast<unsigned long long>(st.rx),
              static_cast<unsigned long long>(st.tx), static_cast<unsigned long long>(st.dropped),
              static_cast<unsigned long long>(st.corrupted), static_cast<unsigned long long>(st.duplicated),
              static_cast<unsigned long long>(st.reordered), static_cast<unsigned long long>(st.blackholed),
              static_cast<unsigned long long>(st.overflow), static_cast<unsigned long long>(st.send_errors),
              static_cast<unsigned long long>(st.non_ip), static_cast<unsigned long long>(kernel_drops(in)));
  std::fflush(stdout);
  return 0;
}
