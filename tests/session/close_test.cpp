// Closing with peers around (docs/session.md "Closing"): the goodbye loses no message and leaves UCX
// nothing to complain about, with one closer or with every session closing at once.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "session_test_util.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;

struct Param {
  const char* tls;
  ProgressThread receiver;
};

std::string name_of(const ::testing::TestParamInfo<Param>& p) {
  return std::string(p.param.tls) + (p.param.receiver == ProgressThread::own ? "_own" : "_shared");
}

// Every line our logger (and UCX's, routed into it) prints at warn or above while it lives.
class WarningLog {
 public:
  WarningLog() {
    runtime::set_log_hook([this](runtime::LogLevel level, std::string_view line) {
      if (level != runtime::LogLevel::warn && level != runtime::LogLevel::error) return;
      std::lock_guard<std::mutex> lock(mutex_);
      lines_.emplace_back(line);
    });
  }
  ~WarningLog() { runtime::set_log_hook({}); }
  std::vector<std::string> ucx_lines() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& l : lines_)
      if (l.rfind("UCX ", 0) == 0) out.push_back(l);
    return out;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

class SessionClose : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    dir = test::temp_dir();
    SessionOptions o = options();
    o.progress_thread = GetParam().receiver;
    receiver_ = std::make_unique<Session>(o);
    receiver_->init_server("127.0.0.1", 1, 0, 0, 0, dir);
  }
  void TearDown() override {
    receiver_.reset();
    std::filesystem::remove_all(dir);
  }
  SessionOptions options() const {
    return test::session_options(GetParam().tls, runtime::ProgressMode::adaptive, 1u << 20, dir);
  }
  // A sender session with `rank`, connected to the receiver both ways.
  std::unique_ptr<Session> connect_sender(std::uint32_t rank) {
    auto sender = std::make_unique<Session>(options());
    EXPECT_EQ(sender->connect(0, rank, "127.0.0.1", 1, receiver_->ctrl_port()), 0u);
    receiver_->wait_peer(rank, 10s);
    return sender;
  }

  std::string dir;
  std::unique_ptr<Session> receiver_;
};

// A sender that sends and closes at once: its last messages travel over UCX while its control
// socket closes; the receiver gets every one, in order, and only then PeerLostError. Sends still
// in flight when close() begins finish first.
TEST_P(SessionClose, MessagesSentJustBeforeCloseAllArriveBeforeTheLoss) {
  constexpr std::uint64_t kTags = 40;
  for (std::uint32_t round = 1; round <= 6; ++round) {
    auto sender = connect_sender(round);
    Session& receiver = *receiver_;
    // A round trip first: both fast paths are up, so the tags below go over UCX.
    sender->ctrl_send(0, 1);
    ASSERT_EQ(receiver.ctrl_recv(round, 10s), 1u);
    receiver.ctrl_send(round, 2);
    ASSERT_EQ(sender->ctrl_recv(0, 10s), 2u);
    // Half sent and returned, half still in flight when close() begins: close lets them finish.
    for (std::uint64_t t = 0; t < kTags / 2; ++t) sender->ctrl_send(0, 100 + t);
    std::vector<std::future<void>> in_flight;
    for (std::uint64_t t = kTags / 2; t < kTags; ++t)
      in_flight.push_back(sender->async_ctrl_send(0, CtrlMessage::from_tag(100 + t), runtime::asio::use_future));
    sender.reset();
    for (auto& f : in_flight) EXPECT_NO_THROW(f.get());
    for (std::uint64_t t = 0; t < kTags; ++t) ASSERT_EQ(receiver.ctrl_recv(round, 10s), 100 + t) << "round " << round;
    EXPECT_THROW(receiver.ctrl_recv(round, 10s), PeerLostError);
    EXPECT_THROW(receiver.put(round, 0, 0, 8), Error);
  }
}

// Bytes put just before a close are at the peer: the closer flushes before it says goodbye.
TEST_P(SessionClose, PutsIssuedJustBeforeCloseLandBeforeTheGoodbye) {
  auto sender = connect_sender(1);
  Session& receiver = *receiver_;
  constexpr std::size_t kPieces = 64, kPiece = 4096;
  test::fill(sender->buffer(), 0, kPieces * kPiece, 7);
  std::vector<std::future<void>> puts;
  for (std::size_t i = 0; i < kPieces; ++i)
    puts.push_back(sender->async_put(0, i * kPiece, i * kPiece, kPiece, runtime::asio::use_future));
  for (auto& f : puts) f.get();
  sender->ctrl_send(0, 9);
  sender.reset();
  EXPECT_EQ(receiver.ctrl_recv(1, 10s), 9u);
  EXPECT_TRUE(test::holds(receiver.buffer(), 0, kPieces * kPiece, 7));
  EXPECT_THROW(receiver.ctrl_recv(1, 10s), PeerLostError);
}

INSTANTIATE_TEST_SUITE_P(TransportsAndReceivers, SessionClose,
                         ::testing::Values(Param{"tcp", ProgressThread::own}, Param{"tcp", ProgressThread::shared},
                                           Param{"shm", ProgressThread::own}, Param{"shm", ProgressThread::shared}),
                         name_of);

// Eight sessions in a full mesh over tcp that all close at the same moment (the end of a job):
// nobody's endpoint flush meets a peer that already went, so UCX reports nothing.
TEST(SessionCloseMesh, EightSessionsClosingAtOnceLeaveUcxNothingToReport) {
  WarningLog log;
  const std::string dir = test::temp_dir();
  constexpr std::uint32_t kRanks = 8;
  for (int round = 0; round < 2; ++round) {
    std::vector<std::unique_ptr<Session>> s;
    for (std::uint32_t r = 0; r < kRanks; ++r) {
      s.push_back(
          std::make_unique<Session>(test::session_options("tcp", runtime::ProgressMode::adaptive, 1u << 20, dir)));
      s[r]->init_server("127.0.0.1", static_cast<std::uint16_t>(100 + r), 0, 0, r, dir);
    }
    for (std::uint32_t r = 1; r < kRanks; ++r)
      for (std::uint32_t p = 0; p < r; ++p)
        ASSERT_EQ(s[r]->connect(p, r, "127.0.0.1", static_cast<std::uint16_t>(100 + p), s[p]->ctrl_port()), p);
    for (std::uint32_t r = 0; r < kRanks; ++r) {
      for (std::uint32_t p = 0; p < kRanks; ++p) {
        if (p != r) s[r]->wait_peer(p, 10s);
      }
    }
    // Traffic on every connection both ways, left to finish in the background while all close.
    std::vector<std::thread> closers;
    for (std::uint32_t r = 0; r < kRanks; ++r) {
      closers.emplace_back([&, r] {
        for (std::uint32_t p = 0; p < kRanks; ++p) {
          if (p == r) continue;
          s[r]->put(p, 0, 64 * r, 64);
          s[r]->ctrl_send(p, r);
        }
        for (std::uint32_t p = 0; p < kRanks; ++p) {
          if (p == r) continue;
          EXPECT_EQ(s[r]->ctrl_recv(p, 10s), p);
        }
        s[r]->close();
      });
    }
    for (auto& t : closers) t.join();
  }
  const auto lines = log.ucx_lines();
  EXPECT_TRUE(lines.empty()) << lines.size() << " UCX lines, the first: " << (lines.empty() ? "" : lines.front());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hmc
