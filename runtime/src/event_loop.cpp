#include "hmc/runtime/event_loop.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "hmc/runtime/log.hpp"
#include "poller_driver.hpp"

namespace hmc::runtime {

namespace detail {
bool asio_uring_cancel_fix_applied() noexcept;
int take_reactor_fd() noexcept;

class LoopWakeup {
 public:
  ~LoopWakeup() {
    if (const int fd = efd.load(); fd >= 0) ::close(fd);
  }
  void signal() noexcept {
    const int fd = efd.load(std::memory_order_acquire);
    if (fd < 0 || signalled.exchange(true, std::memory_order_acq_rel)) return;  // one write per poll()
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(fd, &one, sizeof one);
  }
  // Reads the eventfd empty; true when it had been signalled.
  bool consume() noexcept {
    if (!signalled.exchange(false, std::memory_order_acq_rel)) return false;
    std::uint64_t value = 0;
    [[maybe_unused]] const auto n = ::read(efd.load(std::memory_order_acquire), &value, sizeof value);
    return true;
  }

  // The keeper naps on this bell; a driver's leave (while the keeper waits for it), the stop and
  // nudges ring it. `rung` stays set until the keeper's next nap: a ring is never missed.
  void ring() noexcept {
    {
      std::lock_guard<std::mutex> lock(bell_mutex);
      rung = true;
    }
    bell_cv.notify_one();
  }
  void nap(std::chrono::steady_clock::duration d) {
    std::unique_lock<std::mutex> lock(bell_mutex);
    bell_cv.wait_for(lock, d, [this] { return rung; });
    rung = false;
  }
  // Work was handed over by a thread that will wait for it without driving (a std::future): the
  // keeper drives now rather than keeper_yield after the last caller left. One ring until served.
  void nudge() noexcept {
    if (keeper.load(std::memory_order_acquire) && !nudged.exchange(true, std::memory_order_acq_rel)) ring();
  }

  std::atomic<int> efd{-1};  // set once, by EventLoop::wakeup_fd()
  std::atomic<bool> signalled{false};
  std::atomic<bool> keeper{false};  // set once, by EventLoop::start_keeper()
  std::atomic<bool> nudged{false};  // work waits for the keeper; cleared when the keeper drives
  std::mutex bell_mutex;
  std::condition_variable bell_cv;
  bool rung = false;
};

void signal(LoopWakeup& wakeup) noexcept { wakeup.signal(); }
void nudge(LoopWakeup& wakeup) noexcept { wakeup.nudge(); }

namespace {
// Loops with a wakeup fd (with a keeper) in this process: while there are none, a post costs no
// service lookup.
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
}  // namespace

std::shared_ptr<LoopWakeup> wakeup_for_post(loop_executor loop) {
  if (wakeup_fds.load(std::memory_order_relaxed) == 0 || loop.running_in_this_thread()) return nullptr;
  return asio::use_service<WakeupService>(asio::query(loop, asio::execution::context)).wakeup;
}

std::shared_ptr<LoopWakeup> keeper_for_post(loop_executor loop) {
  if (keepers.load(std::memory_order_relaxed) == 0 || loop.running_in_this_thread()) return nullptr;
  return asio::use_service<WakeupService>(asio::query(loop, asio::execution::context)).wakeup;
}
}  // namespace detail

namespace {
// poll() runs at most this many handlers: a poller that spins (poll, adaptive) re-posts itself.
constexpr std::size_t kPollBatch = 256;
// run_until reads the clock after this many handlers in a row.
constexpr unsigned kClockEvery = 32;
// Waiter spins (dedicated loops): after this many misses in a row a waiter sleeps at once, and
// every kWaiterProbe-th wait spins again to find out whether completions got faster.
constexpr int kWaiterMisses = 8, kWaiterProbe = 16;
// The keeper's nap while a caller is between registering as a waiter and leading or leaving.
constexpr std::chrono::microseconds kWaiterSettle{100};
// How long destruction lets cancelled operations complete before the context dies.
// The drain runs in slices: another one as long as the last ran a handler, at most kDrainLimit.
constexpr std::chrono::milliseconds kDrainSlice{200};
constexpr std::chrono::seconds kDrainLimit{10};
}  // namespace

struct EventLoop::State {
  explicit State(EventLoopOptions o) : options(o) {
    // Creating an I/O object creates the reactor on this thread: its fd is recorded there.
    { asio::steady_timer first(io); }
    reactor_fd = detail::take_reactor_fd();
    asio::use_service<detail::WakeupService>(io).wakeup = wakeup;
  }

  ~State() {
    if (!drained) drain();
    if (wakeup->keeper.load()) --detail::keepers;
    if (epoll_fd >= 0) {
      --detail::wakeup_fds;
      ::close(epoll_fd);  // the eventfd closes with its last LoopWakeup holder
    }
  }

  // A thread that waits for the loop: woken when its condition holds or the driver leaves.
  struct Waiter {
    explicit Waiter(const std::function<bool()>& d) : done(&d) {}
    const std::function<bool()>* done;
    std::condition_variable cv;
    bool woken = false;
  };

  void stop_io() {
    work.reset();
    io.stop();
    wakeup->ring();  // a napping keeper sees the stop
  }

  bool on_driver_thread() const noexcept { return driver.load() == std::this_thread::get_id(); }

  // Lets the completions of operations cancelled by close/shutdown run before the context dies:
  // Asio 1.26's io_uring backend destroys abandoned handlers after the services their I/O objects
  // use, so a handler owning a socket or timer would touch a destroyed service (seen under ASan).
  // A fixed time was not enough: thousands of queued completions (a Session destroyed with its
  // operations in flight) outlasted it, and the cancelled waits behind them died with the context.
  // A slice that runs nothing means only operations that never complete are left (uncancelled I/O).
  void drain() noexcept {
    drained = true;
    io.restart();
    driver.store(std::this_thread::get_id());
    const auto limit = clock::now() + kDrainLimit;
    try {
      while (io.run_for(kDrainSlice) != 0 && !io.stopped() && clock::now() < limit) {
      }
    } catch (const std::exception& e) {
      log().error("a handler threw while the event loop drained at destruction: {}", e.what());
    }
    driver.store(std::thread::id{});
    if (!io.stopped() && clock::now() >= limit) {
      // Handlers kept coming (one re-posting itself): destroying the context now would destroy
      // the rest after the services they use. Leaking it is the lesser harm.
      log().error("event loop still busy {} s into its destruction: its io_context is leaked", kDrainLimit.count());
      (void)io_owner.release();
    }
  }

  // Becomes the driver; false (without driving) once done() holds, the deadline passed or the loop
  // stopped. While another thread drives, sleeps until one of those or until the driver leaves.
  bool lead(const std::function<bool()>& done, clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex);
    Waiter self(done);
    for (bool first = true;; first = false) {
      // The caller just computed its deadline: the clock is read only after a wait.
      if (done() || io.stopped() || (!first && clock::now() >= deadline)) return false;
      if (!leading) break;
      waiters.push_back(&self);
      ++waiter_count;  // before done() is checked again in the wait: pairs with wake_done_waiters
      if (keeper_leading) asio::post(io, [] {});  // wakes the keeper, which steps aside for waiters
      self.cv.wait_until(lock, deadline, [&] { return self.woken || !leading || done(); });
      std::erase(waiters, &self);
      --waiter_count;
      self.woken = false;
    }
    leading = true;
    driver.store(std::this_thread::get_id());
    return true;
  }

  // Wakes the waiters whose condition now holds (after each handler the driver runs).
  void wake_done_waiters() {
    // An RMW, not a load: it orders the handler's effect before the count against the waiter's
    // increment (one of the two reads the other), so a waiter that registers now is never missed.
    if (waiter_count.fetch_add(0, std::memory_order_seq_cst) == 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    for (Waiter* w : waiters) {
      if (!w->woken && (*w->done)()) {
        w->woken = true;
        w->cv.notify_one();
      }
    }
  }

  // Stops driving: a waiter takes over; a teardown handed over by destroy() runs now, off run().
  void leave() noexcept {
    driver.store(std::thread::id{});
    std::unique_ptr<EventLoop> loop;
    std::shared_ptr<void> first;
    {
      std::lock_guard<std::mutex> lock(mutex);
      leading = false;
      keeper_leading = false;
      ++leaves;  // a count, not a clock read (0.1-0.2 us here): blocking calls leave once or twice each
      for (Waiter* w : waiters) w->cv.notify_one();
      if (keeper_awaits_leave) wakeup->ring();  // once per stream of callers, not per call
      loop = std::move(deferred_loop);
      first = std::move(deferred_first);
    }
    first.reset();
    loop.reset();
  }

  bool run_until(const std::function<bool()>& done, clock::time_point deadline) {
    if (on_driver_thread()) throw std::logic_error("EventLoop::run_until called from one of the loop's handlers");
    if (dedicated.load()) throw std::logic_error("EventLoop::run_until on a loop that has its own thread");
    if (!lead(done, deadline)) return done();
    try {
      // Ready handlers run without a clock read (one costs 0.1-0.2 us in a VM); the clock is read
      // before blocking, and every kClockEvery handlers (a spinning poller keeps one ready).
      for (unsigned turn = 1; !done() && !io.stopped(); ++turn) {
        const bool ran = io.poll_one() != 0;
        if (ran) wake_done_waiters();
        if (ran && turn % kClockEvery != 0) continue;
        if (clock::now() >= deadline) break;
        if (!ran) {
          block_until(deadline);
          wake_done_waiters();
        }
      }
    } catch (...) {
      disarm_deadline();
      leave();  // a handler's exception reaches this caller; the loop stays usable for the next
      wakeup->signal();
      throw;
    }
    disarm_deadline();
    leave();
    // Handlers this driver left queued (or a poll() it turned away) belong to an outside selector
    // now: make its wakeup fd readable (no-op without one).
    wakeup->signal();
    return done();
  }

  // Sleeps in the reactor until a handler ran or the deadline passed. Not run_one_until: on
  // io_uring that tags its kernel timeout with a stack address, and the timeout's late CQE, reaped
  // by the next thread to drive, is then run as an operation (a segfault with several drivers).
  // A steady_timer's kernel timeout is tagged with the reactor's own member instead.
  void block_until(clock::time_point deadline) {
    if (deadline != clock::time_point::max() && armed_deadline != deadline) {
      deadline_timer.expires_at(deadline);
      deadline_timer.async_wait([](const error_code&) {});
      armed_deadline = deadline;
    }
    io.run_one();
  }

  // Cancels the driver's deadline timer (its no-op handler runs on a later pass).
  void disarm_deadline() noexcept {
    if (armed_deadline == clock::time_point::max()) return;
    armed_deadline = clock::time_point::max();
    try {
      deadline_timer.cancel();
    } catch (const std::exception& e) {  // a timer's cancel has nothing to fail on; say so if it does
      log().error("event loop: cancelling the deadline timer failed: {}", e.what());
    }
  }

  std::size_t poll(const std::function<bool()>& stop, bool* again) {
    if (on_driver_thread() || dedicated.load()) return 0;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (leading || io.stopped()) {
        // Readable again only when the driver leaves (run_until signals it): an outside selector
        // polling on it meanwhile would spin.
        wakeup->consume();
        return 0;
      }
      leading = true;
      driver.store(std::this_thread::get_id());
    }
    std::size_t n = 0;
    try {
      wakeup->consume();
      for (auto it = pollers.begin(); it != pollers.end();) {
        if (auto p = it->lock()) {
          p->hold();  // each poller cycles once per poll(): a spin goes on in the caller's next poll()
          p->poke();
          ++it;
        } else {
          it = pollers.erase(it);
        }
      }
      bool stopped_early = false;
      while (n < kPollBatch && io.poll_one() != 0) {
        ++n;
        wake_done_waiters();
        if (stop && stop()) {
          stopped_early = true;
          break;
        }
      }
      const bool spinning = release_pollers();
      // More may be ready, or a poller spins: the wakeup fd stays readable (or the caller is told).
      if (n == kPollBatch || stopped_early || spinning) again != nullptr ? void(*again = true) : wakeup->signal();
    } catch (...) {
      release_pollers();
      leave();
      throw;
    }
    leave();
    return n;
  }

  // Ends poll()'s hold: a poller that wanted to cycle again is posted. True when one was.
  bool release_pollers() {
    bool any = false;
    for (const auto& weak : pollers) {
      if (auto p = weak.lock()) any = p->release() || any;
    }
    return any;
  }

  // Takes the driver's seat if it is free (caller-driven loops only); never waits.
  bool try_seat() {
    if (dedicated.load() || on_driver_thread()) return false;
    std::lock_guard<std::mutex> lock(mutex);
    if (leading || io.stopped()) return false;
    leading = true;
    driver.store(std::this_thread::get_id());
    return true;
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
    if (!lead(not_done, clock::time_point::max())) return;
    io.run();
    leave();
  }

  // The keeper's body: drives while no caller wants the loop; once callers came, waits until none
  // has driven for keeper_yield (they keep the loop without a hand-over per call), then drives
  // again; at once when nudged (work for a thread that waits without driving).
  void run_keeper() {
    const auto yield = options.keeper_yield;
    std::uint64_t seen_leaves = 0;  // leaves counted when the keeper last looked
    for (;;) {
      clock::duration nap{};
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (io.stopped()) return;
        // While a caller drives it runs everything: wait for its leave (which rings only while we
        // wait for it), not for a fixed nap that outlasts it (posts then sat there up to 10 ms).
        keeper_awaits_leave = leading;
        if (leading) {
          nap = 10 * yield;
        } else if (waiter_count.load() != 0) {
          // A caller is taking the seat or just left it; nobody rings for that, so look again soon.
          // (A keeper_yield nap here could swallow a nudge's ring: work a future waits for sat it out.)
          nap = std::min<clock::duration>(yield, kWaiterSettle);
        } else if (leaves != seen_leaves && !wakeup->nudged.load()) {
          // Someone drove since the last look: a whole keeper_yield without a leave before driving.
          seen_leaves = leaves;
          nap = yield;
        } else {
          leading = true;
          keeper_leading = true;
          driver.store(std::this_thread::get_id());
        }
      }
      if (nap != clock::duration::zero()) {
        wakeup->nap(nap);
        continue;
      }
      wakeup->nudged.store(false);  // what was handed over before now runs in this turn
      while (waiter_count.load() == 0 && io.run_one() != 0) wake_done_waiters();
      leave();
    }
  }

  int make_wakeup_fd() {
    std::lock_guard<std::mutex> lock(mutex);
    if (epoll_fd >= 0) return epoll_fd;
    if (dedicated.load()) throw std::logic_error("EventLoop::wakeup_fd on a loop that has its own thread");
    if (reactor_fd < 0) throw std::runtime_error("EventLoop::wakeup_fd: the reactor's fd was not recorded");
    const int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    const int ep = efd < 0 ? -1 : ::epoll_create1(EPOLL_CLOEXEC);
    auto add = [ep](int fd) {
      ::epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      return ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0;
    };
    if (ep < 0 || !add(reactor_fd) || !add(efd)) {
      const int err = errno;
      if (efd >= 0) ::close(efd);
      if (ep >= 0) ::close(ep);
      throw std::system_error(err, std::generic_category(), "EventLoop::wakeup_fd");
    }
    epoll_fd = ep;
    wakeup->efd.store(efd, std::memory_order_release);
    ++detail::wakeup_fds;
    return epoll_fd;
  }

  const EventLoopOptions options;
  std::unique_ptr<asio::io_context> io_owner =
      std::make_unique<asio::io_context>(1);  // leaked by a drain that cannot end
  asio::io_context& io = *io_owner;
  asio::executor_work_guard<executor_type> work{io.get_executor()};
  asio::steady_timer deadline_timer{io};                        // run_until's sleep limit; the driver's only
  clock::time_point armed_deadline = clock::time_point::max();  // what deadline_timer waits for
  const std::shared_ptr<detail::LoopWakeup> wakeup = std::make_shared<detail::LoopWakeup>();
  std::thread thread;                     // the owned thread, after start()
  std::atomic<std::thread::id> driver{};  // the thread running handlers now
  std::atomic<bool> dedicated{false};     // start() or run(): that thread runs it for good
  bool drained = false;
  int reactor_fd = -1;                                       // the io_uring ring (or epoll set) Asio sleeps in
  int epoll_fd = -1;                                         // the wakeup fd: reactor_fd + wakeup->efd
  std::vector<std::weak_ptr<detail::PollerDriver>> pollers;  // loop thread only

  std::mutex mutex;  // leading, keeper_*, leaves, waiters, deferred_*
  bool leading = false;
  bool keeper_leading = false;       // the driver is the keeper: waiters wake it
  bool keeper_awaits_leave = false;  // the keeper waits for the driving caller to leave
  std::uint64_t leaves = 0;          // how many times a driver left
  std::vector<Waiter*> waiters;
  std::atomic<std::size_t> waiter_count{0};
  std::atomic<int> waiter_misses{0};         // waiter spins in a row that ended asleep
  std::atomic<unsigned> waiter_waits{0};     // waits while misses stop the spin (for the probe)
  std::unique_ptr<EventLoop> deferred_loop;  // handed over by destroy() from a handler
  std::shared_ptr<void> deferred_first;
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
  if (!s->on_driver_thread()) s->drain();
}

void EventLoop::destroy(std::unique_ptr<EventLoop> loop, std::shared_ptr<void> first) noexcept {
  if (!loop) return;
  State& s = *loop->state_;
  if (s.on_driver_thread()) {
    s.stop_io();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.deferred_first = std::move(first);
    s.deferred_loop = std::move(loop);
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
  ++detail::keepers;
  state_->thread = std::thread([s = state_] { s->run_keeper(); });
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
  state_->leave();
  state_->wakeup->signal();  // what this holder queued belongs to an outside selector now (no-op without one)
}

int EventLoop::wakeup_fd() { return state_->make_wakeup_fd(); }

EventLoop::executor_type EventLoop::executor() noexcept { return state_->io.get_executor(); }

asio::io_context& EventLoop::context() noexcept { return state_->io; }

const EventLoopOptions& EventLoop::options() const noexcept { return state_->options; }

bool EventLoop::in_loop_thread() const noexcept { return state_->on_driver_thread(); }

PollerHandle EventLoop::attach(Poller& poller) {
  auto driver = std::make_shared<detail::PollerDriver>(state_->io, poller, state_->options);
  driver->start();
  state_->pollers.push_back(driver);
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
