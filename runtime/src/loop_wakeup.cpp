#include "loop_wakeup.hpp"

#include <unistd.h>

#include "hmc/runtime/async_op.hpp"

namespace hmc::runtime::detail {

namespace {
std::atomic<int> wakeup_fds{0};
std::atomic<int> keepers{0};

// Finds a loop's wakeup from its io_context: posts made through an executor know no more.
class WakeupService final : public asio::execution_context::service {
 public:
  static inline asio::execution_context::id id;
  explicit WakeupService(asio::execution_context& ctx) : service(ctx) {}
  std::shared_ptr<LoopWakeup> wakeup;  // set when the EventLoop is built, before anyone posts

 private:
  void shutdown() override {}
};

std::shared_ptr<LoopWakeup> find(loop_executor loop) {
  return asio::use_service<WakeupService>(asio::query(loop, asio::execution::context)).wakeup;
}
}  // namespace

LoopWakeup::~LoopWakeup() {
  if (const int fd = efd.load(); fd >= 0) ::close(fd);
}

void LoopWakeup::signal() noexcept {
  const int fd = efd.load(std::memory_order_acquire);
  if (fd < 0 || signalled_.exchange(true, std::memory_order_acq_rel)) return;  // one write per poll()
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(fd, &one, sizeof one);
}

bool LoopWakeup::consume() noexcept {
  if (!signalled_.exchange(false, std::memory_order_acq_rel)) return false;
  std::uint64_t value = 0;
  [[maybe_unused]] const auto n = ::read(efd.load(std::memory_order_acquire), &value, sizeof value);
  return true;
}

void LoopWakeup::ring() noexcept {
  {
    std::lock_guard<std::mutex> lock(bell_mutex_);
    rung_ = true;
  }
  bell_cv_.notify_one();
}

void LoopWakeup::nap(std::chrono::steady_clock::duration d) {
  std::unique_lock<std::mutex> lock(bell_mutex_);
  bell_cv_.wait_for(lock, d, [this] { return rung_; });
  rung_ = false;
}

void LoopWakeup::nudge() noexcept {
  if (keeper.load(std::memory_order_acquire) && !nudged.exchange(true, std::memory_order_acq_rel)) ring();
}

void register_wakeup(asio::io_context& io, std::shared_ptr<LoopWakeup> wakeup) {
  asio::use_service<WakeupService>(io).wakeup = std::move(wakeup);
}

void count_wakeup_fds(int delta) noexcept { wakeup_fds += delta; }
void count_keepers(int delta) noexcept { keepers += delta; }

void signal(LoopWakeup& wakeup) noexcept { wakeup.signal(); }
void nudge(LoopWakeup& wakeup) noexcept { wakeup.nudge(); }

std::shared_ptr<LoopWakeup> wakeup_for_post(loop_executor loop) {
  if (wakeup_fds.load(std::memory_order_relaxed) == 0 || loop.running_in_this_thread()) return nullptr;
  return find(loop);
}

std::shared_ptr<LoopWakeup> keeper_for_post(loop_executor loop) {
  if (keepers.load(std::memory_order_relaxed) == 0 || loop.running_in_this_thread()) return nullptr;
  return find(loop);
}

}  // namespace hmc::runtime::detail
