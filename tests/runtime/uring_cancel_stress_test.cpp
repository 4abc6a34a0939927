// Cancellation/close stress on the loop's reactor (io_uring in the default build). Every cancel and
// close issues cancel SQEs; with Asio 1.26's bug a stale user_data would complete the wrong (or a
// freed) operation queue: ASan reports the use-after-free, and the exact-once checks below catch a
// handler run twice or with another operation's result. Run under ASan by `scripts/test`.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <future>
#include <memory>
#include <vector>

#include "hmc/runtime/event_loop.hpp"

namespace hmc::runtime {
namespace {

using namespace std::chrono_literals;
using asio::local::stream_protocol;

constexpr int kTimers = 2'000;
constexpr int kPairs = 200;
constexpr int kAcceptors = 100;

int rounds() {
  const char* env = std::getenv("HMC_STRESS_ROUNDS");
  return env ? std::atoi(env) : 20;
}

// Runs body on the loop thread and waits until it reports completion (or 120 s pass).
void on_loop(EventLoop& loop, std::function<void(std::function<void()>)> body) {
  std::promise<void> done;
  loop.submit([&] { body([&] { done.set_value(); }); });
  ASSERT_EQ(done.get_future().wait_for(60s), std::future_status::ready) << "stress round hung: a completion was lost";
}

struct Counts {
  int calls = 0;
  int aborted = 0;
  int ok = 0;
  int wrong = 0;
};

class UringCancelStress : public ::testing::Test {
 protected:
  void SetUp() override { loop.start(); }
  EventLoop loop;
};

TEST_F(UringCancelStress, ThousandsOfCancelledAndDestroyedTimerWaits) {
  for (int round = 0; round < rounds(); ++round) {
    auto counts = std::make_shared<Counts>();
    on_loop(loop, [&](std::function<void()> finished) {
      auto timers = std::make_shared<std::vector<std::unique_ptr<asio::steady_timer>>>();
      for (int i = 0; i < kTimers; ++i) {
        // A third expire quickly, the rest are far in the future and get cancelled or destroyed.
        auto t = std::make_unique<asio::steady_timer>(loop.executor(), i % 3 == 0 ? 1ms : 1h);
        t->async_wait([counts, finished, i](const error_code& ec) {
          ++counts->calls;
          if (ec == asio::error::operation_aborted) ++counts->aborted;
          else if (!ec && i % 3 == 0) ++counts->ok;
          else ++counts->wrong;
          if (counts->calls == kTimers) finished();
        });
        timers->push_back(std::move(t));
      }
      for (int i = 0; i < kTimers; ++i) {
        if (i % 3 == 1) (*timers)[static_cast<std::size_t>(i)]->cancel();
        if (i % 3 == 2) (*timers)[static_cast<std::size_t>(i)].reset();  // destroyed with a pending wait
      }
      // Keep the expiring third alive until they fire.
      asio::post(loop.executor(), [timers] {});
      auto keep = std::make_shared<asio::steady_timer>(loop.executor(), 50ms);
      keep->async_wait([keep, timers](const error_code&) {});
    });
    ASSERT_EQ(counts->calls, kTimers);
    ASSERT_EQ(counts->wrong, 0) << "round " << round;
    ASSERT_EQ(counts->ok + counts->aborted, kTimers);
  }
}

TEST_F(UringCancelStress, SocketsClosedWithPendingReadsAndTimeouts) {
  for (int round = 0; round < rounds(); ++round) {
    auto counts = std::make_shared<Counts>();
    on_loop(loop, [&](std::function<void()> finished) {
      for (int i = 0; i < kPairs; ++i) {
        auto a = std::make_shared<stream_protocol::socket>(loop.executor());
        auto b = std::make_shared<stream_protocol::socket>(loop.executor());
        asio::local::connect_pair(*a, *b);
        auto buf = std::make_shared<std::array<char, 8>>();
        const int mode = i % 4;
        auto timer = std::make_shared<asio::steady_timer>(loop.executor(), mode == 2 ? 2ms : 1h);
        asio::async_read(*a, asio::buffer(*buf),
                         [counts, finished, a, b, buf, timer, mode, i](const error_code& ec, std::size_t n) {
                           ++counts->calls;
                           timer->cancel();
                           if (mode == 0) {
                             // Data was written: it must be exactly this pair's bytes.
                             const bool match = !ec && n == 8 && (*buf)[0] == static_cast<char>('a' + i % 26);
                             match ? ++counts->ok : ++counts->wrong;
                           } else if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) {
                             ++counts->aborted;
                           } else {
                             ++counts->wrong;
                           }
                           if (counts->calls == kPairs) finished();
                         });
        if (mode == 0) {
          auto data = std::make_shared<std::array<char, 8>>();
          data->fill(static_cast<char>('a' + i % 26));
          asio::async_write(*b, asio::buffer(*data), [data, b](const error_code&, std::size_t) {});
        } else if (mode == 1) {
          a->close();  // closed with its read pending
        } else if (mode == 2) {
          timer->async_wait([a](const error_code& ec) {
            if (!ec) a->cancel();  // a read timeout
          });
        } else {
          a->cancel();
        }
      }
    });
    ASSERT_EQ(counts->calls, kPairs);
    ASSERT_EQ(counts->wrong, 0) << "round " << round;
  }
}

TEST_F(UringCancelStress, AcceptorsClosedWithPendingAccepts) {
  for (int round = 0; round < rounds(); ++round) {
    auto counts = std::make_shared<Counts>();
    on_loop(loop, [&](std::function<void()> finished) {
      for (int i = 0; i < kAcceptors; ++i) {
        auto acc = std::make_shared<asio::ip::tcp::acceptor>(
            loop.executor(), asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), 0));
        acc->async_accept([counts, finished, acc](const error_code& ec, asio::ip::tcp::socket) {
          ++counts->calls;
          ec == asio::error::operation_aborted ? ++counts->aborted : ++counts->wrong;
          if (counts->calls == kAcceptors) finished();
        });
        acc->close();
      }
    });
    ASSERT_EQ(counts->wrong, 0) << "round " << round;
    ASSERT_EQ(counts->aborted, kAcceptors);
  }
}

}  // namespace
}  // namespace hmc::runtime
