// A hostile rank in a World: rank 0 speaks the collectives' messages by hand (through its own
// session's control channel) while rank 1 runs a broadcast from it. Whatever it announces, rank 1
// fails that collective with a typed error naming rank 0: no crash, no huge allocation, no read
// outside the announced piece.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <thread>

#include "hmc/world/world.hpp"
#include "world/world_message.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
using detail::WorldKind;
using detail::WorldMessage;

struct HostileCase {
  const char* name;
  std::function<WorldMessage(std::uint64_t seq)> answer;  // rank 0's reply to rank 1's ready
  const char* says;                                       // in rank 1's error
};

void PrintTo(const HostileCase& c, std::ostream* os) { *os << c.name; }

class WorldHostileRoot : public ::testing::TestWithParam<HostileCase> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hmc-world-hostile-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    ASSERT_NE(d, nullptr);
    dir = d;
  }
  void TearDown() override { std::filesystem::remove_all(dir); }

  WorldOptions options() const {
    WorldOptions o;
    o.session.buffer_size = 1u << 20;
    o.session.ucx_tls = "shm";
    o.session.ctrl.uds_dir = dir;
    o.timeout = 10s;
    return o;
  }
  std::string dir;
};

TEST_P(WorldHostileRoot, BroadcastFailsTypedNamingTheRoot) {
  const HostileCase& c = GetParam();
  World root(0, 2, options());
  World victim(1, 2, options());
  const std::vector<PeerAddress> directory{root.address(), victim.address()};
  auto joined = std::async(std::launch::async, [&] { root.join(directory); });
  victim.join(directory);
  joined.get();

  auto result = victim.async_broadcast({}, 0, 10s, runtime::asio::use_future);
  // Rank 1 dials rank 0 and says it entered the round; the hostile root answers.
  CtrlMessage ready = root.session().async_ctrl_recv(1, 10s, runtime::asio::use_future).get();
  std::string why;
  const auto m = detail::decode_world_message(ready.bytes(), why);
  ASSERT_TRUE(m) << why;
  ASSERT_EQ(m->kind, WorldKind::ready);
  root.session()
      .async_ctrl_send(1, CtrlMessage::from_bytes(detail::encode(c.answer(m->seq))), runtime::asio::use_future)
      .get();

  try {
    result.get();
    ADD_FAILURE() << "the broadcast took the hostile root's answer";
  } catch (const ProtocolError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(c.says), std::string::npos) << what;
    EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
    std::printf("%s: %s\n", c.name, what.c_str());
  }
  EXPECT_THROW(victim.barrier(1s), ProtocolError) << "the world stays unusable after a protocol error";
}

WorldMessage notice(std::uint64_t seq, std::uint64_t piece, std::uint64_t total, std::uint64_t rounds) {
  return WorldMessage{WorldKind::notice, 0, 1, seq, 0, piece, total, rounds};
}

INSTANTIATE_TEST_SUITE_P(
    World, WorldHostileRoot,
    ::testing::Values(
        // Status 0 is success: the abort still fails the world, never as a null error (std::terminate).
        HostileCase{"abort_with_success",
                    [](std::uint64_t seq) { return WorldMessage{WorldKind::abort, 0, 0, seq, 0, 0, 0, 0}; },
                    "abort with unknown reason 0"},
        HostileCase{"size_beyond_any_buffer",
                    [](std::uint64_t seq) { return notice(seq, 100, std::uint64_t{1} << 41, 1); },
                    "inconsistent sizes"},
        HostileCase{"rounds_that_do_not_fit_the_size", [](std::uint64_t seq) { return notice(seq, 100, 100, 5); },
                    "inconsistent sizes"},
        HostileCase{"piece_of_the_wrong_size", [](std::uint64_t seq) { return notice(seq, 50, 100, 1); },
                    "piece of the wrong size"},
        HostileCase{"a_message_of_another_round", [](std::uint64_t seq) { return notice(seq + 1, 100, 100, 1); },
                    "every rank must call the same collectives"}),
    [](const ::testing::TestParamInfo<HostileCase>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace hmc
