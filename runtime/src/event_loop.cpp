#include "hmc/runtime/event_loop.hpp"

#include <algorithm>
#include <stdexcept>

#include "caller_driver.hpp"
#include "driver_seat.hpp"
#include "hmc/runtime/log.hpp"
#include "keeper.hpp"
#include "loop_wakeup.hpp"
#include "poller_driver.hpp"
#include "selector_driver.hpp"

namespace hmc::runtime {

namespace detail {
bool asio_uring_cancel_fix_applied() noexcept;
int take_reactor_fd() noexcept;
}  // namespace detail

namespace {
// Waiter spins (dedicated loops): after this many misses in a row a waiter sleeps at once, and
// every kWaiterProbe-th wait spins again to find out whether completions got faster.
constexpr int kWaiterMisses = 8, kWaiterProbe = 16;
// How long destruction lets cancelled operations complete before the context dies.
// The drain runs in slices: another one as long as the last ran a handler, at most kDrainLimit.
constexpr std::chrono::milliseconds kDrainSlice{200};
constexpr std::chrono::seconds kDrainLimit{10};

// The io_context's reactor is created, and its fd recorded, by the first I/O object made on it.
int make_reactor(asio::io_context& io) {
  { asio::steady_timer first(io); }
  return detail::take_reactor_fd();
}
}  // namespace

// The loop and its drivers: the seat decides which thread runs handlers; the owned thread, the
// keeper, blocking callers (CallerDriver) and an outside selector (SelectorDriver) take it.
struct EventLoop::State {
  explicit State(EventLoopOptions o) : options(o) { detail::register_wakeup(io, wakeup); }

  ~State() {
    if (!drained) drain();
    if (wakeup->keeper.load()) detail::count_keepers(-1);
  }

  void stop_io() {
    work.reset();
    io.stop();
    wakeup->ring();  // a napping keeper sees the stop
  }

  // Lets the completions of operations cancelled by close/shutdown run before the context dies:
  // Asio 1.26's io_uring backend destroys abandoned handlers after the services their I/O objects
  // use, so a handler owning a socket or timer would touch a destroyed service (seen under ASan).
  // A fixed time was not enough: thousands of queued completions (a Session destroyed with its
  // operations in flight) outlasted it, and the cancelled waits behind them died with the context.
  // A slice that runs nothing means only operations that never complete are left (uncancelled I/O).
  void drain() noexcept {
    drained = true;
    io.restart();
    seat.set_driver(std::this_thread::get_id());
    const auto limit = clock::now() + kDrainLimit;
    try {
      while (io.run_for(kDrainSlice) != 0 && !io.stopped() && clock::now() < limit) {
      }
    } catch (const std::exception& e) {
      log().error("a handler threw while the event loop drained at destruction: {}", e.what());
    }
    seat.set_driver(std::thread::id{});
    if (!io.stopped() && clock::now() >= limit) {
      // Handlers kept coming (one re-posting itself): destroying the context now would destroy
      // the rest after the services they use. Leaking it is the lesser harm.
      log().error("event loop still busy {} s into its destruction: its io_context is leaked", kDrainLimit.count());
      (void)io_owner.release();
    }
  }

  bool run_until(const std::function<bool()>& done, clock::time_point deadline) {
    if (seat.on_driver_thread()) throw std::logic_error("EventLoop::run_until called from one of the loop's handlers");
    if (dedicated.load()) throw std::logic_error("EventLoop::run_until on a loop that has its own thread");
    return caller.run_until(done, deadline);
  }

  std::size_t poll(const std::function<bool()>& stop, bool* again) {
    if (seat.on_driver_thread() || dedicated.load()) return 0;
    return selector.poll(stop, again);
  }

  // Takes the driver's seat if it is free (caller-driven loops only); never waits.
  bool try_seat() {
    if (dedicated.load() || seat.on_driver_thread()) return false;
    return seat.try_take();
  }

  // How long a thread blocked on a dedicated loop's operation spins before it sleeps: waiter_spin,
  // none in event mode, none once recent spins missed (but a probe every kWaiterProbe-th wait).
  clock::duration waiter_spin() noexcept {
    if (options.mode == ProgressMode::event) return {};
    if (waiter_misses.load(std::memory_order_relaxed) < kWaiterMisses) return options.waiter_spin;
    return waiter_waits.fetch_add(1, std::memory_order_relaxed) % kWaiterProbe == 0 ? options.waiter_spin
                                                                                    : clock::duration{};
  }
  void waiter_spun(bool hit) noexcept {
    const int m = waiter_misses.load(std::memory_order_relaxed);
    waiter_misses.store(hit ? 0 : std::min(m + 1, kWaiterMisses), std::memory_order_relaxed);
  }

  // The owned thread's body, or run(): the whole time it runs, the loop is this thread's.
  void run_dedicated() {
    static const std::function<bool()> not_done = [] { return false; };
    if (!seat.lead(not_done, clock::time_point::max())) return;
    io.run();
    seat.leave();
  }

  int make_wakeup_fd() {
    if (dedicated.load()) throw std::logic_error("EventLoop::wakeup_fd on a loop that has its own thread");
    return selector.wakeup_fd();
  }

  const EventLoopOptions options;
  std::unique_ptr<asio::io_context> io_owner =
      std::make_unique<asio::io_context>(1);  // leaked by a drain that cannot end
  asio::io_context& io = *io_owner;
  const int reactor_fd = make_reactor(io);  // the io_uring ring (or epoll set) Asio sleeps in
  asio::executor_work_guard<executor_type> work{io.get_executor()};
  const std::shared_ptr<detail::LoopWakeup> wakeup = std::make_shared<detail::LoopWakeup>();
  detail::DriverSeat seat{io, *wakeup};
  detail::CallerDriver caller{io, seat, *wakeup};
  detail::SelectorDriver selector{io, seat, *wakeup, reactor_fd};
  detail::Keeper keeper{io, seat, *wakeup, options.keeper_yield};
  std::thread thread;                  // the owned thread or the keeper
  std::atomic<bool> dedicated{false};  // start() or run(): that thread runs it for good
  bool drained = false;
  std::atomic<int> waiter_misses{0};      // waiter spins in a row that ended asleep
  std::atomic<unsigned> waiter_waits{0};  // waits while misses stop the spin (for the probe)
};

EventLoop::EventLoop(EventLoopOptions options) : state_(std::make_shared<State>(options)) {
  log().debug("event loop created: reactor={} uring_cancel_fix={} progress_mode={}", backend(), uring_cancel_fix(),
              to_string(options.mode));
}

EventLoop::~EventLoop() {
  const std::shared_ptr<State> s = state_;  // not moved out: handlers the drain runs may use this object
  s->stop_io();
  if (s->thread.joinable()) {
    if (s->thread.get_id() == std::this_thread::get_id()) {
      s->thread.detach();  // destroyed on its own thread: it ends when its run() returns
    } else {
      s->thread.join();
    }
  }
  // A run() on this thread's stack holds the state: it drains once that run() returns.
  if (!s->seat.on_driver_thread()) s->drain();
}

void EventLoop::destroy(std::unique_ptr<EventLoop> loop, std::shared_ptr<void> first) noexcept {
  if (!loop) return;
  State& s = *loop->state_;
  if (s.seat.on_driver_thread()) {
    s.stop_io();
    s.seat.defer_teardown(std::move(loop), std::move(first));
    return;
  }
  loop->stop();
  first.reset();
  loop.reset();
}

void EventLoop::start() {
  if (state_->thread.joinable()) return;
  state_->dedicated.store(true);
  state_->thread = std::thread([s = state_] { s->run_dedicated(); });
}

void EventLoop::start_keeper() {
  if (state_->thread.joinable()) return;
  if (state_->dedicated.load()) throw std::logic_error("EventLoop::start_keeper on a loop that has its own thread");
  state_->wakeup->keeper.store(true);
  detail::count_keepers(+1);
  state_->thread = std::thread([s = state_] { s->keeper.run(); });
}

void EventLoop::run() {
  const std::shared_ptr<State> s = state_;  // this object may be destroyed by a handler
  s->dedicated.store(true);
  s->run_dedicated();
}

void EventLoop::stop() {
  state_->stop_io();
  std::thread& t = state_->thread;
  if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
}

bool EventLoop::stopped() const noexcept { return state_->io.stopped(); }

bool EventLoop::dedicated() const noexcept { return state_->dedicated.load(); }

bool EventLoop::run_until(const std::function<bool()>& done, clock::time_point deadline) {
  const std::shared_ptr<State> s = state_;
  return s->run_until(done, deadline);
}

std::size_t EventLoop::poll(const std::function<bool()>& stop) {
  const std::shared_ptr<State> s = state_;
  return s->poll(stop, nullptr);
}

std::size_t EventLoop::poll(const std::function<bool()>& stop, bool& again) {
  again = false;
  const std::shared_ptr<State> s = state_;
  return s->poll(stop, &again);
}

bool EventLoop::wait(OneShot& op, clock::time_point deadline) {
  if (op.ready()) return true;
  if (!dedicated()) return run_until([&op] { return op.ready(); }, deadline);
  State& s = *state_;
  if (const clock::duration spin = s.waiter_spin(); spin > clock::duration::zero()) {
    const bool hit = op.spin(spin);
    s.waiter_spun(hit);
    if (hit) return true;
  }
  return op.wait_until(deadline);
}

EventLoop::Seat::Seat(EventLoop& loop) {
  if (loop.state_->try_seat()) state_ = loop.state_;
}

EventLoop::Seat::~Seat() {
  if (!state_) return;
  state_->seat.leave();
  state_->wakeup->signal();  // what this holder queued belongs to an outside selector now (no-op without one)
}

int EventLoop::wakeup_fd() { return state_->make_wakeup_fd(); }

EventLoop::executor_type EventLoop::executor() noexcept { return state_->io.get_executor(); }

asio::io_context& EventLoop::context() noexcept { return state_->io; }

const EventLoopOptions& EventLoop::options() const noexcept { return state_->options; }

bool EventLoop::in_loop_thread() const noexcept { return state_->seat.on_driver_thread(); }

PollerHandle EventLoop::attach(Poller& poller) {
  auto driver = std::make_shared<detail::PollerDriver>(state_->io, poller, state_->options);
  driver->start();
  state_->selector.add(driver);
  return PollerHandle(std::move(driver));
}

std::string_view EventLoop::backend() noexcept {
#if defined(BOOST_ASIO_HAS_IO_URING) && defined(BOOST_ASIO_DISABLE_EPOLL)
  return "io_uring";
#else
  return "epoll";
#endif
}

bool EventLoop::uring_cancel_fix() noexcept { return detail::asio_uring_cancel_fix_applied(); }

}  // namespace hmc::runtime
