// check_worker_address against real UCX worker addresses (which it must accept: every session
// connect runs it) and against the corruptions UCX 1.13 would abort on or read past.
#include <gtest/gtest.h>
#include <ucp/api/ucp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "ucx/ucx_context.hpp"
#include "ucx/ucx_peer_info.hpp"
#include "ucx/ucx_worker_address.hpp"

namespace hmc::detail {
namespace {

using Bytes = std::vector<std::byte>;

// The full and the network-only address of a fresh worker on a context made as a Session makes it.
std::vector<Bytes> real_addresses(const std::string& tls) {
  UcxContextOptions o;
  o.tls = tls;
  o.net_devices = "lo";
  auto ctx = UcxContext::create(o);
  ucp_worker_params_t wp{};
  ucp_worker_h worker = nullptr;
  EXPECT_EQ(ucp_worker_create(ctx->get(), &wp, &worker), UCS_OK);
  std::vector<Bytes> out;
  for (unsigned flags : {0u, unsigned{UCP_WORKER_ADDRESS_FLAG_NET_ONLY}}) {
    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
    attr.address_flags = flags;
    EXPECT_EQ(ucp_worker_query(worker, &attr), UCS_OK);
    const auto* a = reinterpret_cast<const std::byte*>(attr.address);
    out.emplace_back(a, a + attr.address_length);
    ucp_worker_release_address(worker, attr.address);
  }
  ucp_worker_destroy(worker);
  return out;
}

// Offsets of the parts a corruption patches, found by walking with the format's rules.
struct Layout {
  std::size_t first_attr = 0;  // the first iface's packed attributes (overhead, bandwidth, latency)
  std::size_t first_dev = 0;   // the first device's length-and-flags byte
};

Layout layout(const Bytes& a) {
  auto at = [&](std::size_t i) { return static_cast<std::uint8_t>(a.at(i)); };
  const std::uint8_t flags = at(0) >> 4;
  std::size_t i = 1 + 8;
  if (flags & 0x4) i += 8;
  if (flags & 0x1) i += 1 + at(i);
  Layout l;
  for (;;) {
    const bool empty = (at(i) & 0x80) != 0;
    const std::uint8_t dev = at(i + 1);
    if (l.first_dev == 0) l.first_dev = i + 1;
    i += 2 + ((dev & 0x40) ? 1 : 0) + ((dev & 0x20) ? 1 : 0) + (dev & 0x1f);
    if (!empty) {
      l.first_attr = i + 2;
      return l;
    }
    if (dev & 0x80) throw std::runtime_error("an address without interfaces");
  }
}

void put_float(Bytes& a, std::size_t at, float f) { std::memcpy(a.data() + at, &f, sizeof f); }

// A synthetic v1 address: one device holding `ifaces` interfaces with `eps` endpoint addresses each.
struct Synthetic {
  unsigned ifaces = 1;
  unsigned eps = 0;
  int paths = -1;  // -1: no number-of-paths byte
  std::uint8_t lane = 0;
  float overhead = 1e-8f, bandwidth = 1e9f, latency = 1e-7f;
  std::uint16_t csum = 0x1234;                // the transport; 0xd3a7 is posix
  std::vector<unsigned> iface_addr{1, 2, 3};  // a posix one starts with its 8-byte segment id
  unsigned dev_len = 2;

  Bytes build() const {
    Bytes b;
    auto u8 = [&](unsigned v) { b.push_back(static_cast<std::byte>(v)); };
    auto f32 = [&](float f) {
      b.resize(b.size() + 4);
      std::memcpy(b.data() + b.size() - 4, &f, 4);
    };
    u8(0x00);                                      // v1, no flags
    for (int i = 0; i < 8; ++i) u8(0x11);          // uuid
    u8(0x01);                                      // md index 1
    u8(0x80 | (paths >= 0 ? 0x40 : 0) | dev_len);  // the last device
    if (paths >= 0) u8(static_cast<unsigned>(paths));
    for (unsigned i = 0; i < dev_len; ++i) u8(0xaa);
    for (unsigned t = 0; t < ifaces; ++t) {
      u8(csum & 0xff), u8(csum >> 8);
      f32(overhead), f32(bandwidth), f32(latency);
      for (int i = 0; i < 4; ++i) u8(0);  // priority and flags
      u8((t + 1 == ifaces ? 0x80 : 0) | (eps > 0 ? 0x40 : 0) | static_cast<unsigned>(iface_addr.size()));
      for (unsigned v : iface_addr) u8(v);
      for (unsigned e = 0; e < eps; ++e) {
        u8(2), u8(9), u8(9);
        u8((e + 1 == eps ? 0x80 : 0) | (e == 0 ? lane : e % 6));
      }
    }
    return b;
  }
};

// Refused, and the reason names what is wrong.
void expect_refused(const Bytes& a, const std::string& because) {
  const std::string why = check_worker_address(a);
  EXPECT_NE(why.find(because), std::string::npos) << "reason '" << why << "', expected '" << because << "'";
}

class RealAddress : public ::testing::TestWithParam<const char*> {};

TEST_P(RealAddress, IsAcceptedAndEachCorruptionRefused) {
  int with_interfaces = 0;
  for (const Bytes& a : real_addresses(GetParam())) {
    ASSERT_FALSE(a.empty());
    ASSERT_EQ(check_worker_address(a), "");
    for (std::uint8_t version : {1, 2, 15}) {
      Bytes bad = a;
      bad[0] = static_cast<std::byte>((static_cast<std::uint8_t>(a[0]) & 0xf0) | version);
      expect_refused(bad, "not address version 1");
    }
    for (std::size_t n = 0; n < a.size(); ++n)
      EXPECT_NE(check_worker_address(std::span(a).first(n)), "") << "truncated to " << n << " of " << a.size();
    Bytes trailing = a;
    trailing.push_back(std::byte{0});
    expect_refused(trailing, "trailing bytes");
    if (a.size() == 10 && a[9] == std::byte{0xff}) continue;  // an empty list (shm's network-only address)
    const Layout l = layout(a);
    ++with_interfaces;
    constexpr float kNan = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
    const struct {
      std::size_t offset;
      float value;
      const char* because;
    } floats[] = {{0, kNan, "overhead"},   {0, -1e-9f, "overhead"}, {0, kInf, "overhead"},  {4, kNan, "bandwidth"},
                  {4, -1e9f, "bandwidth"}, {4, 0.0f, "bandwidth"},  {4, kInf, "bandwidth"}, {8, kNan, "latency"},
                  {8, -1e-7f, "latency"},  {8, -kInf, "latency"}};
    for (const auto& f : floats) {
      Bytes bad = a;
      put_float(bad, l.first_attr + f.offset, f.value);
      expect_refused(bad, f.because);
    }
    // A number-of-paths byte of zero inserted into the first device (UCX divides by it).
    Bytes zero_paths = a;
    const auto dev = static_cast<std::uint8_t>(a[l.first_dev]);
    if ((dev & 0x40) == 0) {
      zero_paths[l.first_dev] = static_cast<std::byte>(dev | 0x40);
      zero_paths.insert(zero_paths.begin() + static_cast<std::ptrdiff_t>(l.first_dev) + 1, std::byte{0});
    } else {
      zero_paths[l.first_dev + 1] = std::byte{0};
    }
    expect_refused(zero_paths, "zero paths");
  }
  EXPECT_GE(with_interfaces, 1) << "no address with an interface to corrupt";
}

// shm and tcp alone and together, and with the self transport; "" is the environment's (UCX_TLS).
INSTANTIATE_TEST_SUITE_P(Tls, RealAddress, ::testing::Values("shm", "tcp", "shm,tcp", "self,shm,tcp", ""));

// With UCX_ADDRESS_DEBUG_INFO the address carries the worker's name after the header.
TEST(WorkerAddress, RealAddressWithDebugInfoIsAccepted) {
  ::setenv("UCX_ADDRESS_DEBUG_INFO", "y", 1);
  const std::vector<Bytes> addresses = real_addresses("shm,tcp");
  ::unsetenv("UCX_ADDRESS_DEBUG_INFO");
  for (const Bytes& a : addresses) {
    EXPECT_NE(static_cast<std::uint8_t>(a.at(0)) & 0x10, 0) << "no worker name in the address";
    EXPECT_EQ(check_worker_address(a), "");
  }
}

TEST(WorkerAddress, SyntheticLimits) {
  EXPECT_EQ(check_worker_address(Synthetic{}.build()), "");
  EXPECT_EQ(check_worker_address(Synthetic{.ifaces = 128}.build()), "");
  expect_refused(Synthetic{.ifaces = 129}.build(), "more than 128 interfaces");
  EXPECT_EQ(check_worker_address(Synthetic{.eps = 6}.build()), "");
  expect_refused(Synthetic{.eps = 7}.build(), "more than 6 endpoint addresses");
  EXPECT_EQ(check_worker_address(Synthetic{.eps = 1, .lane = 5}.build()), "");
  expect_refused(Synthetic{.eps = 1, .lane = 6}.build(), "lane index");
  expect_refused(Synthetic{.eps = 1, .lane = 0x3f}.build(), "lane index");
  EXPECT_EQ(check_worker_address(Synthetic{.paths = 2}.build()), "");
  expect_refused(Synthetic{.paths = 0}.build(), "zero paths");
}

// posix opens what its segment id's flags say: /proc/<pid>/fd or shm_open (what peers send); with
// neither UCX reads a directory from the address (asserting when there is none).
TEST(WorkerAddress, PosixSegmentFlags) {
  const unsigned procfs = 0x80, shm_open = 0x40, pid_ns = 0x10;  // the id's top byte
  const std::uint16_t posix = 0xd3a7;
  EXPECT_EQ(check_worker_address(Synthetic{.csum = posix, .iface_addr = {1, 0, 0, 0, 0, 0, 0, procfs}}.build()), "");
  EXPECT_EQ(check_worker_address(Synthetic{.csum = posix, .iface_addr = {1, 0, 0, 0, 0, 0, 0, shm_open}}.build()), "");
  expect_refused(Synthetic{.csum = posix, .iface_addr = {1, 0, 0, 0, 0, 0, 0, 0}}.build(),
                 "neither procfs nor shm_open");
  expect_refused(Synthetic{.csum = posix, .iface_addr = {1, 2, 3}}.build(), "posix interface address too short");
  expect_refused(Synthetic{.csum = posix, .iface_addr = {1, 0, 0, 0, 0, 0, 0, procfs | pid_ns}}.build(),
                 "without its PID namespace");
  Synthetic with_ns{.csum = posix, .iface_addr = {1, 0, 0, 0, 0, 0, 0, procfs | pid_ns}};
  with_ns.iface_addr.resize(16, 7);
  EXPECT_EQ(check_worker_address(with_ns.build()), "");
}

// UCP hands a transport NULL for an empty address; posix, cma and tcp read their device address,
// and every known transport its iface address.
TEST(WorkerAddress, KnownTransportsGetTheirAddresses) {
  const std::uint16_t self = 0x7563, cma = 0x8b47, tcp = 0x19cf;
  EXPECT_EQ(check_worker_address(Synthetic{.csum = self, .dev_len = 0}.build()), "");
  EXPECT_EQ(check_worker_address(Synthetic{.csum = cma}.build()), "");
  expect_refused(Synthetic{.csum = cma, .dev_len = 0}.build(), "device without an address");
  expect_refused(Synthetic{.csum = tcp, .dev_len = 0}.build(), "device without an address");
  expect_refused(Synthetic{.csum = self, .iface_addr = {}}.build(), "empty interface address");
  EXPECT_EQ(check_worker_address(Synthetic{.csum = 0x1234, .iface_addr = {}, .dev_len = 0}.build()), "");
}

TEST(WorkerAddress, EmptyResourceList) {
  Bytes empty(9, std::byte{0});
  empty.push_back(std::byte{0xff});
  EXPECT_EQ(check_worker_address(empty), "");
  empty.push_back(std::byte{0});
  expect_refused(empty, "trailing bytes after an empty resource list");
  expect_refused({}, "no header");
}

// decode refuses a peer info whose full or network-only address is malformed.
TEST(WorkerAddress, PeerInfoDecodeChecksBothAddresses) {
  UcxPeerInfo info;
  info.worker_address = Synthetic{}.build();
  info.net_worker_address = Synthetic{}.build();
  UcxPeerInfo out;
  EXPECT_EQ(UcxPeerInfo::decode(info.encode(), out), "");
  UcxPeerInfo bad_full = info;
  bad_full.worker_address[0] = std::byte{2};
  const std::string full_why = UcxPeerInfo::decode(bad_full.encode(), out);
  EXPECT_NE(full_why.find("malformed UCX worker address: not address version 1"), std::string::npos) << full_why;
  UcxPeerInfo bad_net = info;
  bad_net.net_worker_address.pop_back();
  const std::string net_why = UcxPeerInfo::decode(bad_net.encode(), out);
  EXPECT_NE(net_why.find("malformed UCX network-only worker address: truncated"), std::string::npos) << net_why;
}

}  // namespace
}  // namespace hmc::detail
