// OneShot: the completion a blocking call waits on, set from the loop, with a deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

#include "hmc/runtime/event_loop.hpp"
#include "hmc/runtime/one_shot.hpp"

namespace hmc::runtime {
namespace {

using namespace std::chrono_literals;

OneShot::clock::time_point in(std::chrono::milliseconds d) { return OneShot::clock::now() + d; }

TEST(OneShot, SetBeforeTheWaitIsReadyAtOnceAndKeepsTheError) {
  OneShot op;
  EXPECT_FALSE(op.ready());
  op.set(std::make_exception_ptr(std::runtime_error("failed")));
  EXPECT_TRUE(op.ready());
  EXPECT_TRUE(op.wait_until(in(0ms)));
  EXPECT_THROW(std::rethrow_exception(op.error()), std::runtime_error);
}

TEST(OneShot, ASleepingWaiterIsWokenBySetFromAnotherThread) {
  for (int i = 0; i < 200; ++i) {  // set() lands before, during and after the waiter goes to sleep
    OneShot op;
    std::thread setter([&] {
      if (i % 2 == 0) std::this_thread::yield();
      op.set(nullptr);
    });
    EXPECT_TRUE(op.wait_until(in(20s)));
    EXPECT_FALSE(op.error());
    setter.join();
  }
}

TEST(OneShot, ASpinThatMissesThenSleepsUntilSet) {
  OneShot op;
  EXPECT_FALSE(op.spin(10us));
  std::thread setter([&] {
    std::this_thread::sleep_for(5ms);
    op.set(nullptr);
  });
  EXPECT_TRUE(op.wait_until(in(20s)));
  setter.join();
}

TEST(OneShot, AWaitThatTimesOutLeavesItUsableBySetLater) {
  auto op = std::make_shared<OneShot>();  // shared with the setter, as a blocking call shares it
  EXPECT_FALSE(op->wait_until(in(1ms)));
  std::thread setter([op] { op->set(nullptr); });  // must not wake anyone or touch freed memory
  setter.join();
  EXPECT_TRUE(op->ready());
}

TEST(OneShot, EventLoopWaitSpinsOrSleepsOnADedicatedLoopAndDrivesACallerDrivenOne) {
  for (const ProgressMode mode : {ProgressMode::adaptive, ProgressMode::event}) {
    EventLoop owned(EventLoopOptions{mode});
    owned.start();
    for (int i = 0; i < 50; ++i) {
      OneShot op;
      owned.submit([&op] { op.set(nullptr); });
      EXPECT_TRUE(owned.wait(op, in(20s)));
    }
    OneShot never;
    EXPECT_FALSE(owned.wait(never, in(1ms)));
  }
  EventLoop driven;
  OneShot op;
  std::thread::id ran_on;
  driven.submit([&] {
    ran_on = std::this_thread::get_id();
    op.set(nullptr);
  });
  EXPECT_TRUE(driven.wait(op, in(20s)));
  EXPECT_EQ(ran_on, std::this_thread::get_id()) << "the waiting thread drove the loop";
}

}  // namespace
}  // namespace hmc::runtime
