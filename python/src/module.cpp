// The _hmc extension: a thin binding of hmc::Session for the `hmc` Python package. The Python
// layer (python/hmc/) validates arguments and adds the reference API, asyncio and payloads.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "buffer_view.hpp"
#include "call_gate.hpp"
#include "completion_queue.hpp"
#include "hmc/error.hpp"
#include "hmc/memory.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/log.hpp"
#include "hmc/session.hpp"
#include "log_queue.hpp"
#include "op_state.hpp"

namespace py = pybind11;

namespace hmc::python {
namespace {

using Seconds = std::optional<double>;

// "Wait without limit" as a deadline far from any overflow: the steady clock counts nanoseconds
// from boot (~292 years), and callers add a little slack to a timeout.
constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365 * 100);

// RC QPs per RDMA peer (SessionOptions::num_chs): the verbs bootstrap message carries at most 64.
constexpr std::size_t kMaxNumChs = 64;

// User seconds -> milliseconds: NaN and negatives refused (naming the argument), inf = kForever.
std::chrono::milliseconds to_ms(double seconds, const char* name) {
  const auto ms = runtime::seconds_to_ms(seconds);
  if (!ms) throw InvalidArgumentError(std::string(name) + " must be a number of seconds >= 0 (inf: no limit)");
  return std::min(*ms, kForever);
}

std::chrono::milliseconds to_ms(Seconds seconds, std::chrono::milliseconds fallback, const char* name) {
  return seconds ? to_ms(*seconds, name) : fallback;
}

// put_remote / get_remote's fast path takes the caller's arguments as they are and uses them only
// when each is plain; for anything else it sends nothing and says so, and the Python layer checks
// the arguments on the general path (_args, which raises the typed errors).
struct PlainRma {
  std::uint32_t rank = 0;
  std::string ip;  // empty: `rank` names the peer
  std::optional<std::uint16_t> port;
  std::size_t local = 0;
  std::size_t remote = 0;
  std::size_t size = 0;
};

// An exact int in [lo, hi]: never a bool, float or NumPy scalar (those go the general path).
std::optional<std::uint64_t> plain_int(py::handle h, std::uint64_t lo, std::uint64_t hi) {
  if (!PyLong_CheckExact(h.ptr())) return std::nullopt;
  const unsigned long long v = PyLong_AsUnsignedLongLong(h.ptr());
  if (PyErr_Occurred() != nullptr) {  // negative, or >= 2**64
    PyErr_Clear();
    return std::nullopt;
  }
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

// The peer as a rank (an int) or an 'ip' (no ':') with port None or an int; 'ip:port', tuples and
// the rest go the general path (_args.peer).
std::optional<PlainRma> plain_rma(py::handle peer, py::handle port, py::handle local, py::handle remote,
                                  py::handle size) {
  const auto l = plain_int(local, 0, UINT64_MAX);
  const auto r = plain_int(remote, 0, UINT64_MAX);
  const auto n = plain_int(size, 1, UINT64_MAX);
  if (!l || !r || !n) return std::nullopt;
  PlainRma a;
  a.local = *l;
  a.remote = *r;
  a.size = *n;
  if (PyLong_CheckExact(peer.ptr())) {
    const auto rank = plain_int(peer, 0, UINT32_MAX);
    if (!rank) return std::nullopt;
    a.rank = static_cast<std::uint32_t>(*rank);
    return a;
  }
  if (!PyUnicode_CheckExact(peer.ptr())) return std::nullopt;
  Py_ssize_t len = 0;
  const char* text = PyUnicode_AsUTF8AndSize(peer.ptr(), &len);
  if (text == nullptr) {
    PyErr_Clear();
    return std::nullopt;
  }
  a.ip.assign(text, static_cast<std::size_t>(len));
  if (a.ip.empty() || a.ip.find(':') != std::string::npos) return std::nullopt;
  if (!port.is_none()) {
    const auto p = plain_int(port, 0, UINT16_MAX);
    if (!p) return std::nullopt;
    a.port = static_cast<std::uint16_t>(*p);
  }
  return a;
}

// Python objects an unfinished operation still needs, parked here when its Op is dropped; touched
// only with the GIL held, released once the operation is done.
class Graveyard {
 public:
  void bury(std::shared_ptr<OpState> state, py::object keep, std::shared_ptr<void> pin) {
    entries_.push_back(Entry{std::move(state), std::move(keep), std::move(pin)});
  }
  void collect() {
    std::erase_if(entries_, [](const Entry& e) { return e.state->done(); });
  }
  void clear() { entries_.clear(); }

 private:
  struct Entry {
    std::shared_ptr<OpState> state;
    py::object keep;
    std::shared_ptr<void> pin;
  };
  std::vector<Entry> entries_;
};

// What a Core shares with the registrations and operations that may outlive its calls.
struct Life {
  CallGate gate;
  std::mutex mutex;
  bool session_gone = false;
  std::vector<RegisteredMemory> orphans;  // released while closing: dropped after the Session
  Session* session = nullptr;             // valid inside gate.enter() / leave()
  bool caller_driven = false;             // ProgressThread::caller or shared: waits drive the loop
};

// One operation as Python sees it. `keep` (Python objects) and `pin` (a registration) stay alive
// until the transfer is done, even when the Op is dropped first.
class Op {
 public:
  Op(std::shared_ptr<OpState> state, std::shared_ptr<Graveyard> graveyard, py::object keep,
     std::shared_ptr<void> pin, std::shared_ptr<Life> life)
      : state_(std::move(state)),
        graveyard_(std::move(graveyard)),
        keep_(std::move(keep)),
        pin_(std::move(pin)),
        life_(std::move(life)) {}
  Op(Op&&) = default;
  Op& operator=(Op&&) = delete;
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;
  ~Op() {
    if (state_ && !state_->done() && (!keep_.is_none() || pin_))
      graveyard_->bury(state_, std::move(keep_), std::move(pin_));
  }

  std::uint64_t id() const { return state_->id(); }
  bool done() const { return state_->done(); }
  // timeout None: without limit. A caller-driven session is driven by this thread meanwhile
  // (one driver at a time: a second waiting thread sleeps until its operation is done).
  bool wait(Seconds timeout) {
    const std::chrono::milliseconds limit = timeout ? to_ms(*timeout, "timeout") : kForever;
    py::gil_scoped_release release;
    if (life_->caller_driven && !state_->done() && life_->gate.enter()) {
      struct Leave {
        CallGate& gate;
        ~Leave() { gate.leave(); }
      } leave{life_->gate};
      return life_->session->progress_until([st = state_.get()] { return st->done(); }, runtime::deadline_after(limit));
    }
    return state_->wait(timeout ? std::optional(limit) : std::nullopt);  // own thread; or closing, which drives the loop and fails the operation
  }
  // None, an int (tag), or bytes; raises the operation's error.
  py::object result() const {
    if (!state_->done()) throw InvalidArgumentError("result() before the operation completed: wait() first");
    const auto msg = state_->result();
    if (!msg) return py::none();
    if (msg->kind() == CtrlKind::tag) return py::int_(msg->tag());
    const auto b = msg->bytes();
    return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
  }
  void notify(const std::shared_ptr<CompletionQueue>& queue) { state_->notify(queue); }
  // Withdraws a waiting ctrl_recv (no-op for other operations, which UCX cannot cancel).
  void cancel() {
    if (cancel_) cancel_();
  }
  void set_cancel(std::function<void()> f) { cancel_ = std::move(f); }

 private:
  std::shared_ptr<OpState> state_;
  std::shared_ptr<Graveyard> graveyard_;
  py::object keep_;
  std::shared_ptr<void> pin_;
  std::shared_ptr<Life> life_;
  std::function<void()> cancel_;
};

// User memory registered for zero-copy transfers. Operations using it hold this too, so the
// registration and the Python buffer live until the last of them is done. Destroyed with the GIL.
class RegHolder {
 public:
  RegHolder(std::shared_ptr<Life> life, py::object obj) : life_(std::move(life)), obj_(std::move(obj)) {}
  RegHolder(const RegHolder&) = delete;
  RegHolder& operator=(const RegHolder&) = delete;
  ~RegHolder() {
    if (life_->gate.enter()) {
      memory = RegisteredMemory{};  // unregisters
      life_->gate.leave();
    } else {
      std::lock_guard<std::mutex> lock(life_->mutex);
      if (!life_->session_gone) life_->orphans.push_back(std::move(memory));  // the Session is being closed
    }
  }
  py::object& obj() { return obj_; }

  std::unique_ptr<BufferView> view;
  RegisteredMemory memory;

 private:
  std::shared_ptr<Life> life_;
  py::object obj_;
};

class Registered {
 public:
  explicit Registered(std::shared_ptr<RegHolder> holder) : holder_(std::move(holder)) {}
  std::size_t size() const { return held().memory.size(); }
  // New operations refuse it; operations in flight keep it until they are done.
  void release() { holder_.reset(); }
  const std::shared_ptr<RegHolder>& holder() const {
    held();
    return holder_;
  }

 private:
  const RegHolder& held() const {
    if (!holder_) throw InvalidArgumentError("the registered buffer was released");
    return *holder_;
  }
  std::shared_ptr<RegHolder> holder_;
};

class Core;

// A call in flight: the Session stays alive until it ends (close() waits for it).
class Use {
 public:
  Use(CallGate& gate, Session* session) : gate_(gate), session_(session) {}
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;
  ~Use() { gate_.leave(); }
  Session& operator*() const { return *session_; }
  Session* operator->() const { return session_; }

 private:
  CallGate& gate_;
  Session* session_;
};

class Core {
 public:
  Core(std::size_t buffer_size, int mem_type, int device_id, std::string local_ip, const std::string& progress_mode,
       const std::string& progress_thread, std::string ucx_tls, std::string ucx_net_devices, double timeout_s, std::string uds_dir,
       std::optional<std::string> auth_key, bool authenticate, std::optional<double> heartbeat_interval_s,
       std::optional<std::uint32_t> heartbeat_misses, std::optional<std::string> tls_cert,
       std::optional<std::string> tls_key, std::optional<std::string> tls_ca, std::size_t num_chs,
       bool shared_memory) {
    SessionOptions o;
    o.shared_memory = shared_memory;
    o.buffer_size = buffer_size;
    o.mem_type = static_cast<MemoryType>(mem_type);
    o.device_id = device_id;
    if (!local_ip.empty()) o.local_ip = std::move(local_ip);
    const auto mode = runtime::parse_progress_mode(progress_mode);
    if (!mode) throw InvalidArgumentError("progress_mode must be 'adaptive', 'event', 'poll' or 'hybrid'");
    o.progress_mode = *mode;
    if (progress_thread == "own") {
      o.progress_thread = ProgressThread::own;
    } else if (progress_thread == "caller") {
      o.progress_thread = ProgressThread::caller;
    } else if (progress_thread == "shared") {
      o.progress_thread = ProgressThread::shared;
    } else {
      throw InvalidArgumentError("progress_thread must be 'shared', 'caller' or 'own'");
    }
    o.ucx_tls = std::move(ucx_tls);
    o.ucx_net_devices = std::move(ucx_net_devices);
    // Every operation carries this deadline: it must be finite.
    if (!std::isfinite(timeout_s) || timeout_s <= 0)
      throw InvalidArgumentError("timeout must be finite and > 0 seconds");
    o.timeout = to_ms(timeout_s, "timeout");
    if (!uds_dir.empty()) o.ctrl.uds_dir = std::move(uds_dir);
    // Unset ones keep the defaults and their environment variables (HMC_AUTH_KEY, HMC_TLS_*).
    if (auth_key) o.auth_key = std::move(*auth_key);
    o.authenticate = authenticate;
    if (heartbeat_interval_s) {
      if (!std::isfinite(*heartbeat_interval_s) || *heartbeat_interval_s < 0)
        throw InvalidArgumentError("heartbeat_interval must be finite and >= 0 seconds (0: no heartbeats)");
      o.ctrl.heartbeat_interval = to_ms(*heartbeat_interval_s, "heartbeat_interval");
    }
    if (heartbeat_misses) o.ctrl.heartbeat_misses = *heartbeat_misses;
    if (tls_cert) o.ctrl.tls_cert = std::move(*tls_cert);
    if (tls_key) o.ctrl.tls_key = std::move(*tls_key);
    if (tls_ca) o.ctrl.tls_ca = std::move(*tls_ca);
    if (num_chs == 0 || num_chs > kMaxNumChs) throw InvalidArgumentError("num_chs must be 1.." + std::to_string(kMaxNumChs));
    o.num_chs = num_chs;
    py::gil_scoped_release release;
    session_ = std::make_unique<Session>(std::move(o));
    life_->session = session_.get();
    life_->caller_driven = session_->options().progress_thread != ProgressThread::own;
  }
  ~Core() { close(); }
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // Every use of the Session goes through this: ClosedError once close() has begun.
  Use use() {
    if (!life_->gate.enter()) throw ClosedError("the session is closed");
    return Use(life_->gate, session_.get());
  }

  int completion_fd() const { return queue_->fd(); }

  // ProgressThread::caller: readable while progress() has work.
  int wakeup_fd() { return use()->wakeup_fd(); }

  // Runs the ready handlers and progresses UCX once (never blocks, so the GIL stays held), then
  // returns the ids of notify=True operations completed meanwhile, like drain(): the completions
  // found on this thread are collected here, without the completion fd. `soon`: this is the pass
  // set_soon's hook scheduled (only that one ends the wait for it: any other pass clearing it
  // would schedule one more, and each extra pass re-schedules itself while a poller spins).
  std::vector<std::uint64_t> progress(bool soon) {
    {
      Use s = use();
      queue_->collect_here();
      struct Stop {
        CompletionQueue& q;
        ~Stop() { q.stop_collecting(); }
      } stop{*queue_};
      // One pass (EventLoop::poll): what is ready, every completion in it, one cycle per poller;
      // a poller that spins cycles again in asyncio's next turn (set_soon's hook, else the wakeup fd).
      if (soon) soon_due_ = false;
      poll_here(*s, {});
    }
    ask_soon();
    return drain();
  }

  // asyncio with progress_thread='caller' (called on the event loop's thread): `soon()` schedules a
  // progress() in the loop's next turn (call_soon). Submissions made on this thread then start
  // inside a progress() of their own (no wakeup-fd signal) and a pass that wants another asks
  // soon() instead of making the wakeup fd readable: no eventfd write and read per operation.
  void set_soon(py::object soon) {
    soon_ = std::move(soon);
    selector_thread_ = std::this_thread::get_id();
  }

  // One progress() pass on this thread; a next pass due at once is asked of soon() by ask_soon().
  void poll_here(Session& s, const std::function<bool()>& stop) {
    if (!on_selector_thread()) {
      s.progress(stop);
      return;
    }
    bool again = false;
    s.progress(stop, again);
    soon_wanted_ = soon_wanted_ || again;
  }

  // After the gate is left (no Python code runs inside it): soon(), once until its progress(true) runs.
  void ask_soon() {
    if (!soon_wanted_) return;
    soon_wanted_ = false;
    if (soon_due_ || soon_.is_none()) return;
    soon_due_ = true;
    soon_();
  }

  bool on_selector_thread() const { return !soon_.is_none() && std::this_thread::get_id() == selector_thread_; }

  // On the selector thread, start(session, state) runs as a handler of this thread's own progress()
  // pass right after: posted without the wakeup-fd signal, and inside the loop the operation starts
  // without a second post. The gate is entered again there: close() may have begun meanwhile.
  template <class Start>
  void start_here(Session& s, const std::shared_ptr<OpState>& st, Start start) {
    runtime::asio::post(s.executor(), [life = life_, st, start = std::move(start)]() mutable {
      if (!life->gate.enter()) return st->complete(std::make_exception_ptr(ClosedError("the session is closed")));
      struct Leave {
        CallGate& gate;
        ~Leave() { gate.leave(); }
      } leave{life->gate};
      try {
        start(*life->session, st);
      } catch (...) {
        st->complete(std::current_exception());
      }
    });
    // Other operations completed in this pass are collected as in progress(), without the
    // completion fd: the next progress() (asked of soon()) returns their ids.
    queue_->collect_here();
    struct Stop {
      CompletionQueue& q;
      ~Stop() { q.stop_collecting(); }
    } stop{*queue_};
    poll_here(s, [st = st.get()] { return st->done(); });
    soon_wanted_ = soon_wanted_ || queue_->has_ids();
  }

  // Ids of notify=True operations completed since the last drain; also frees finished keep-alives.
  std::vector<std::uint64_t> drain() {
    graveyard_->collect();
    return queue_->drain();
  }

  // `start` is copied into a handler on the selector thread (start_here): it captures by value.
  template <class Start>
  Op submit(bool notify, py::object keep, std::shared_ptr<void> pin, Start start) {
    auto state = std::make_shared<OpState>();
    const bool started_here = notify && on_selector_thread();
    {
      Use s = use();
      if (started_here) {
        start_here(*s, state, std::move(start));
      } else {
        if (notify) state->notify(queue_);
        start(*s, state);
      }
    }
    // Done inside its own pass: Python settles it at once, no queue entry (and no completion-fd write).
    if (notify && started_here && !state->done()) state->notify(queue_);
    graveyard_->collect();
    ask_soon();
    return Op(std::move(state), graveyard_, std::move(keep), std::move(pin), life_);
  }

  static auto completer(const std::shared_ptr<OpState>& st) {
    return [st](std::exception_ptr e) { st->complete(std::move(e)); };
  }

  Op rma(bool is_put, std::uint32_t rank, std::size_t local, std::size_t remote, std::size_t n, bool notify) {
    return submit(notify, py::none(), nullptr, [=](Session& s, const std::shared_ptr<OpState>& st) {
      is_put ? s.async_put(rank, local, remote, n, completer(st)) : s.async_get(rank, local, remote, n, completer(st));
    });
  }

  // The rank of a plain peer; nullopt when no peer holds the address (the general path waits for
  // it on a serving session, or raises) or on any other error (the general path raises it).
  static std::optional<std::uint32_t> rank_of(Session& s, const PlainRma& a) {
    if (a.ip.empty()) return a.rank;
    try {
      return s.resolve_peer(a.ip, a.port);
    } catch (const Error&) {
      return std::nullopt;
    }
  }

  // A blocking Session's put_remote / get_remote in one call: submits and waits as Session::put /
  // get do (GIL released; a caller-driven session is driven by this thread meanwhile), raising the
  // operation's error. False, with nothing sent, when an argument is not plain.
  bool rma_wait(bool is_put, py::handle peer, py::handle port, py::handle local, py::handle remote,
                py::handle size) {
    const auto a = plain_rma(peer, port, local, remote, size);
    if (!a) return false;
    graveyard_->collect();
    Use s = use();
    py::gil_scoped_release release;
    const auto rank = rank_of(*s, *a);
    if (!rank) return false;
    is_put ? s->put(*rank, a->local, a->remote, a->size) : s->get(*rank, a->local, a->remote, a->size);
    return true;
  }

  // An AsyncSession's put_remote / get_remote in one call: submits and, on a caller-driven session,
  // progresses until the operation is done (on shm it nearly always is). True when it completed
  // without an error: no Op, no queue entry, no asyncio future. Else its Op (still running, or
  // failed), which Python settles as any other; None, with nothing sent, when an argument is not plain.
  py::object rma_start(bool is_put, py::handle peer, py::handle port, py::handle local, py::handle remote,
                       py::handle size) {
    const auto a = plain_rma(peer, port, local, remote, size);
    if (!a) return py::none();
    auto state = std::make_shared<OpState>();
    {
      Use s = use();
      const auto rank = rank_of(*s, *a);
      if (!rank) return py::none();
      auto start = [is_put, rank = *rank, l = a->local, r = a->remote, n = a->size](Session& session,
                                                                                  const std::shared_ptr<OpState>& st) {
        is_put ? session.async_put(rank, l, r, n, completer(st)) : session.async_get(rank, l, r, n, completer(st));
      };
      if (on_selector_thread()) {
        start_here(*s, state, std::move(start));
      } else {
        start(*s, state);
        if (life_->caller_driven) {
          try {
            s->progress([st = state.get()] { return st->done(); });
          } catch (const ClosedError&) {  // close() is under way: it fails the operation, settled below
          }
        }
      }
    }
    graveyard_->collect();
    ask_soon();
    if (state->succeeded()) return py::bool_(true);
    state->notify(queue_);
    return py::cast(Op(std::move(state), graveyard_, py::none(), nullptr, life_));
  }

  Op batch(bool is_put, std::uint32_t rank, const std::vector<std::tuple<std::size_t, std::size_t, std::size_t>>& segs,
           bool notify) {
    std::vector<Segment> v;
    v.reserve(segs.size());
    for (const auto& [l, r, n] : segs) v.push_back(Segment{l, r, n});
    return submit(notify, py::none(), nullptr, [=, v = std::move(v)](Session& s, const std::shared_ptr<OpState>& st) mutable {
      is_put ? s.async_put_batch(rank, std::move(v), completer(st))
             : s.async_get_batch(rank, std::move(v), completer(st));
    });
  }

  Op pipeline(bool is_put, std::uint32_t rank, std::size_t local, std::size_t remote, std::size_t n, std::size_t chunk,
              std::size_t window, bool notify) {
    return submit(notify, py::none(), nullptr, [=](Session& s, const std::shared_ptr<OpState>& st) {
      is_put ? s.async_put_pipeline(rank, local, remote, n, chunk, window, completer(st))
             : s.async_get_pipeline(rank, local, remote, n, chunk, window, completer(st));
    });
  }

  Op registered(bool is_put, const Registered& reg, std::size_t off, std::uint32_t rank, std::size_t remote,
                std::size_t n, bool notify) {
    std::shared_ptr<RegHolder> holder = reg.holder();
    return submit(notify, py::none(), holder, [=](Session& s, const std::shared_ptr<OpState>& st) {
      is_put ? s.async_put_from(holder->memory, off, rank, remote, n, completer(st))
             : s.async_get_into(holder->memory, off, rank, remote, n, completer(st));
    });
  }

  Registered register_memory(py::object obj, int mem_type, std::uintptr_t device_ptr, std::size_t nbytes) {
    auto holder = std::make_shared<RegHolder>(life_, obj);
    void* data = reinterpret_cast<void*>(device_ptr);
    std::size_t size = nbytes;
    if (device_ptr == 0) {
      holder->view = std::make_unique<BufferView>(obj, /*writable=*/false, "register");
      data = holder->view->data();
      size = holder->view->size();
    }
    Use s = use();
    holder->memory = s->register_memory(data, size, static_cast<MemoryType>(mem_type));
    return Registered(std::move(holder));
  }

  // A control message from a Python int (a tag) or anything with the buffer protocol (bytes).
  static CtrlMessage message_of(const py::object& value, const char* what) {
    if (py::isinstance<py::int_>(value)) {
      try {
        return CtrlMessage::from_tag(value.cast<std::uint64_t>());
      } catch (const py::cast_error&) {
        PyErr_Clear();
        throw InvalidArgumentError(std::string(what) + ": tag must be an int in [0, 2**64)");
      }
    }
    BufferView v(value, false, what);
    return CtrlMessage::from_bytes({static_cast<const std::byte*>(v.data()), v.size()});
  }

  // put, then `tag` to the peer's ctrl_recv once the bytes are there (Session::async_put_notify).
  Op put_notify(std::uint32_t rank, std::size_t local, std::size_t remote, std::size_t n, py::object tag, bool notify) {
    CtrlMessage m = message_of(tag, "notify");
    return submit(notify, py::none(), nullptr, [=, m = std::move(m)](Session& s, const std::shared_ptr<OpState>& st) mutable {
      s.async_put_notify(rank, local, remote, n, std::move(m), completer(st));
    });
  }

  Op registered_put_notify(const Registered& reg, std::size_t off, std::uint32_t rank, std::size_t remote,
                           std::size_t n, py::object tag, bool notify) {
    CtrlMessage m = message_of(tag, "notify");
    std::shared_ptr<RegHolder> holder = reg.holder();
    return submit(notify, py::none(), holder, [=, m = std::move(m)](Session& s, const std::shared_ptr<OpState>& st) mutable {
      s.async_put_from_notify(holder->memory, off, rank, remote, n, std::move(m), completer(st));
    });
  }

  Op ctrl_send(std::uint32_t rank, py::object value, bool notify) {
    CtrlMessage m = message_of(value, "ctrl_send");
    return submit(notify, py::none(), nullptr, [rank, m = std::move(m)](Session& s, const std::shared_ptr<OpState>& st) mutable {
      s.async_ctrl_send(rank, std::move(m), completer(st));
    });
  }

  Op ctrl_recv(std::uint32_t rank, Seconds timeout, bool notify) {
    auto signal = std::make_shared<runtime::asio::cancellation_signal>();
    runtime::loop_executor ex = use()->executor();  // valid while the gate admits calls
    const auto t = to_ms(timeout, use()->options().timeout, "timeout");
    Op op = submit(notify, py::none(), nullptr, [rank, t, signal](Session& s, const std::shared_ptr<OpState>& st) {
      s.async_ctrl_recv(rank, t,
                        runtime::asio::bind_cancellation_slot(
                            signal->slot(), [st, signal](std::exception_ptr e, CtrlMessage m) {
                              st->complete(e, e ? std::nullopt : std::optional<CtrlMessage>(std::move(m)));
                            }));
    });
    // Cancellation slots are not thread-safe: emit on the session's loop, where the receive waits.
    op.set_cancel([life = life_, ex, signal] {
      if (!life->gate.enter()) return;  // closed: the receive has already failed
      // post_to_loop: a caller-driven loop's wakeup fd tells its driver (asyncio) of it
      runtime::post_to_loop(ex, [signal] { signal->emit(runtime::asio::cancellation_type::terminal); });
      life->gate.leave();
    });
    return op;
  }

  std::size_t write(py::handle obj, std::size_t offset) {
    BufferView v(obj, false, "buffer put");
    Use s = use();
    py::gil_scoped_release release;
    s->buffer().write_from_cpu(v.data(), v.size(), offset);
    return v.size();
  }

  std::size_t read_into(py::handle obj, std::optional<std::size_t> nbytes, std::size_t offset) {
    BufferView v(obj, true, "buffer get_into");
    const std::size_t n = nbytes.value_or(v.size());
    if (n > v.size())
      throw InvalidArgumentError("get_into: nbytes " + std::to_string(n) + " exceeds the destination's " +
                                 std::to_string(v.size()) + " bytes");
    Use s = use();
    py::gil_scoped_release release;
    s->buffer().read_to_cpu(v.data(), n, offset);
    return n;
  }

  py::bytes read_bytes(std::size_t offset, std::size_t n) {
    Use s = use();
    s->buffer().check_range(offset, n);
    std::string out(n, '\0');
    {
      py::gil_scoped_release release;
      s->buffer().read_to_cpu(out.data(), n, offset);
    }
    return py::bytes(out);
  }

  // Memory at a raw address (CPU, or a device pointer such as a CUDA tensor's data_ptr) to/from
  // the buffer. The caller guarantees the address holds n bytes.
  void copy_ptr(bool into_buffer, std::uintptr_t ptr, std::size_t n, std::size_t offset, int mem_type,
                int device_id) {
    if (ptr == 0) throw InvalidArgumentError("the pointer is null");
    const auto type = static_cast<MemoryType>(mem_type);
    const bool host = type == MemoryType::CPU || type == MemoryType::DEFAULT;
    std::unique_ptr<Memory> gpu = host ? nullptr : Memory::create(type, device_id);
    Use s = use();
    py::gil_scoped_release release;
    auto& buf = s->buffer();
    if (host) {
      into_buffer ? buf.write_from_cpu(reinterpret_cast<const void*>(ptr), n, offset)
                  : buf.read_to_cpu(reinterpret_cast<void*>(ptr), n, offset);
    } else {
      into_buffer ? buf.write_from_gpu(reinterpret_cast<const void*>(ptr), n, offset, gpu.get())
                  : buf.read_to_gpu(reinterpret_cast<void*>(ptr), n, offset, gpu.get());
    }
  }

  void copy_within(std::size_t dst, std::size_t src, std::size_t n) {
    Use s = use();
    py::gil_scoped_release release;
    s->buffer().copy_within(dst, src, n);
  }

  // Calls whose waits release the GIL; f(Session&) runs inside a Use.
  template <class F>
  auto blocking(F f) {
    Use s = use();
    py::gil_scoped_release release;
    return f(*s);
  }

  // Refuses new calls, wakes the waits in flight (they fail with ClosedError), waits for every
  // call inside the Core to leave, then destroys the Session. A second close() waits for the first.
  void close() {
    if (!life_->gate.begin_close()) {
      py::gil_scoped_release release;
      life_->gate.wait_closed();
      return;
    }
    {
      py::gil_scoped_release release;
      session_->close();
      life_->gate.wait_idle();
      session_.reset();
    }
    std::vector<RegisteredMemory> orphans;
    {
      std::lock_guard<std::mutex> lock(life_->mutex);
      life_->session_gone = true;
      orphans.swap(life_->orphans);
    }
    orphans.clear();  // the Session is gone: nothing left to unregister from
    graveyard_->clear();
    life_->gate.set_closed();
  }

 private:
  std::shared_ptr<Life> life_ = std::make_shared<Life>();
  std::unique_ptr<Session> session_;
  std::shared_ptr<CompletionQueue> queue_ = std::make_shared<CompletionQueue>();
  std::shared_ptr<Graveyard> graveyard_ = std::make_shared<Graveyard>();
  py::object soon_ = py::none();     // set_soon's hook (touched with the GIL held)
  bool soon_due_ = false;            // soon() was called and its progress(true) has not run yet
  bool soon_wanted_ = false;         // a pass on the selector thread wants another at once
  std::thread::id selector_thread_;  // the thread that called set_soon (asyncio's)
};

// The one place C++ errors become Python exceptions: hmc._errors maps each status to its class.
void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const Error& e) {
    // Never destroyed: a static py::object would be released after the interpreter is gone.
    static auto* by_status = new py::object(py::module_::import("hmc._errors").attr("by_status"));
    py::object cls = (*by_status)(static_cast<int>(e.status()));
    PyErr_SetString(cls.ptr(), e.what());
  }
}

// put_remote / get_remote's entries, Core.rma_wait and Core.rma_start, are plain METH_FASTCALL
// methods: pybind11's dispatcher costs about 0.3 us, a sixth of a whole shm put from Python.
// Errors become Python exceptions through pybind11's translators (translate() above included).
template <bool Wait>
PyObject* rma_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs) noexcept {
  try {
    if (nargs != 6) throw py::type_error("(is_put, peer, port, local_off, remote_off, nbytes) expected");
    Core& core = py::handle(self).cast<Core&>();
    const bool is_put = args[0] == Py_True;
    if constexpr (Wait) {
      return py::bool_(core.rma_wait(is_put, args[1], args[2], args[3], args[4], args[5])).release().ptr();
    } else {
      return core.rma_start(is_put, args[1], args[2], args[3], args[4], args[5]).release().ptr();
    }
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (...) {
    if (!py::detail::apply_exception_translators(py::detail::get_internals().registered_exception_translators))
      PyErr_SetString(PyExc_SystemError, "an exception escaped the exception translators");
  }
  return nullptr;
}

void add_fast_method(py::handle cls, PyMethodDef* def) {
  py::object method =
      py::reinterpret_steal<py::object>(PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), def));
  if (!method) throw py::error_already_set();
  py::setattr(cls, def->ml_name, method);
}

// The runtime's log hook feeds this queue while a Python logger is set (hmc.set_extern_logger).
std::mutex log_mutex;
std::shared_ptr<LogQueue> log_target;

void set_log_queue(std::shared_ptr<LogQueue> queue) {
  std::lock_guard<std::mutex> lock(log_mutex);
  log_target = queue;
  if (!queue) return runtime::set_log_hook({});
  runtime::set_log_hook([queue](runtime::LogLevel level, std::string_view message) { queue->push(level, message); });
}

}  // namespace
}  // namespace hmc::python

PYBIND11_MODULE(_hmc, m) {
  using namespace hmc::python;
  using hmc::Session;
  m.doc() = "HMC core bindings; use the `hmc` package";
  py::register_exception_translator(&translate);

  py::class_<CompletionQueue, std::shared_ptr<CompletionQueue>>(m, "CompletionQueue")
      .def(py::init<>())
      .def("fd", &CompletionQueue::fd)
      .def("drain", &CompletionQueue::drain);

  py::class_<LogQueue, std::shared_ptr<LogQueue>>(m, "LogQueue")
      .def(py::init<>())
      .def("fd", &LogQueue::fd)
      .def("drain", [](LogQueue& q) {
        auto [lines, dropped] = q.drain();
        py::list out;
        for (const auto& [level, text] : lines) {
          py::object msg = py::reinterpret_steal<py::object>(
              PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
          out.append(py::make_tuple(static_cast<int>(level), msg));
        }
        return py::make_tuple(out, dropped);
      });

  py::class_<Op>(m, "Op")
      .def_property_readonly("id", &Op::id)
      .def("done", &Op::done)
      .def("wait", &Op::wait, py::arg("timeout") = py::none())
      .def("result", &Op::result)
      .def("notify", &Op::notify)
      .def("cancel", &Op::cancel);

  py::class_<Registered>(m, "Registered")
      .def_property_readonly("nbytes", &Registered::size)
      .def("release", &Registered::release);

  py::class_<Core> core(m, "Core");
  core
      .def(py::init<std::size_t, int, int, std::string, const std::string&, const std::string&, std::string,
                    std::string, double,
                    std::string, std::optional<std::string>, bool, std::optional<double>,
                    std::optional<std::uint32_t>, std::optional<std::string>, std::optional<std::string>,
                    std::optional<std::string>, std::size_t, bool>(),
           py::arg("buffer_size"), py::arg("mem_type"), py::arg("device_id"), py::arg("local_ip"),
           py::arg("progress_mode"), py::arg("progress_thread"), py::arg("ucx_tls"), py::arg("ucx_net_devices"), py::arg("timeout"),
           py::arg("uds_dir"), py::arg("auth_key") = py::none(), py::arg("authenticate") = true,
           py::arg("heartbeat_interval") = py::none(), py::arg("heartbeat_misses") = py::none(),
           py::arg("tls_cert") = py::none(), py::arg("tls_key") = py::none(), py::arg("tls_ca") = py::none(),
           py::arg("num_chs") = 1, py::arg("shared_memory") = true)
      .def("init_server",
           [](Core& c, const std::string& ip, std::uint16_t ucx_port, std::uint16_t rdma_port, std::uint16_t ctrl_port,
              std::uint32_t self_id, const std::string& uds_dir) {
             c.blocking([&](Session& s) { s.init_server(ip, ucx_port, rdma_port, ctrl_port, self_id, uds_dir); });
           })
      .def("init_server_sdk",
           [](Core& c, const std::string& ip, std::uint16_t port, int conn) {
             c.blocking([&](Session& s) { s.init_server(ip, port, static_cast<hmc::ConnType>(conn)); });
           })
      .def("connect",
           [](Core& c, std::uint32_t peer_id, std::uint32_t self_id, const std::string& ip, std::uint16_t data_port,
              std::uint16_t ctrl_port, int conn, Seconds timeout) {
             return c.blocking([&](Session& s) {
               return s.connect(peer_id, self_id, ip, data_port, ctrl_port, static_cast<hmc::ConnType>(conn),
                                to_ms(timeout, s.options().timeout, "timeout"));
             });
           })
      .def("connect_sdk",
           [](Core& c, const std::string& ip, std::uint16_t port, int conn, Seconds timeout) {
             return c.blocking([&](Session& s) {
               return s.connect(ip, port, static_cast<hmc::ConnType>(conn),
                                to_ms(timeout, s.options().timeout, "timeout"));
             });
           })
      .def("close_server", [](Core& c) { c.blocking([](Session& s) { s.close_server(); }); })
      .def("set_local_ip", [](Core& c, const std::string& ip) { c.blocking([&](Session& s) { s.set_local_ip(ip); }); })
      .def("wait_peer",
           [](Core& c, std::uint32_t rank, Seconds timeout) {
             c.blocking([&](Session& s) { s.wait_peer(rank, to_ms(timeout, s.options().timeout, "timeout")); });
           })
      .def("rank", [](Core& c) { return c.use()->rank(); })
      .def("conn_type", [](Core& c) { return static_cast<int>(c.use()->conn_type()); })
      .def("ctrl_port", [](Core& c) { return c.use()->ctrl_port(); })
      .def("peers", [](Core& c) { return c.use()->peers(); })
      .def("resolve", [](Core& c, const std::string& ip,
                         std::optional<std::uint16_t> port) { return c.use()->resolve_peer(ip, port); })
      .def("wait_peer_at",
           [](Core& c, const std::string& ip, std::optional<std::uint16_t> port, Seconds timeout) {
             return c.blocking(
                 [&](Session& s) { return s.wait_peer_at(ip, port, to_ms(timeout, s.options().timeout, "timeout")); });
           })
      .def("transports", [](Core& c, std::uint32_t rank) { return c.use()->transports(rank); })
      .def("native_memory_types",
           [](Core& c) {
             std::vector<int> out;
             for (hmc::MemoryType t : c.use()->native_memory_types()) out.push_back(static_cast<int>(t));
             return out;
           })
      .def("buffer_staged", [](Core& c) { return c.use()->buffer_staged(); })
      .def("buffer_size", [](Core& c) { return c.use()->buffer().size(); })
      .def("buffer_ptr", [](Core& c) { return reinterpret_cast<std::uintptr_t>(c.use()->buffer().data()); })
      .def("buffer_mem_type", [](Core& c) { return static_cast<int>(c.use()->buffer().type()); })
      .def("buffer_device_id", [](Core& c) { return c.use()->buffer().device_id(); })
      .def("write", &Core::write, py::arg("obj"), py::arg("offset"))
      .def("read_into", &Core::read_into, py::arg("obj"), py::arg("nbytes"), py::arg("offset"))
      .def("read_bytes", &Core::read_bytes)
      .def("copy_within", &Core::copy_within)
      .def("copy_ptr", &Core::copy_ptr)
      .def("rma", &Core::rma)
      .def("batch", &Core::batch)
      .def("pipeline", &Core::pipeline)
      .def("registered_rma", &Core::registered)
      .def("put_notify", &Core::put_notify)
      .def("registered_put_notify", &Core::registered_put_notify)
      .def("register", &Core::register_memory)
      .def("ctrl_send", &Core::ctrl_send)
      .def("ctrl_recv", &Core::ctrl_recv)
      .def("completion_fd", &Core::completion_fd)
      .def("wakeup_fd", &Core::wakeup_fd)
      .def("progress", &Core::progress, py::arg("soon") = false)
      .def("set_soon", &Core::set_soon)
      .def("drain", &Core::drain)
      .def("disconnect", [](Core& c, std::uint32_t rank) { c.blocking([&](Session& s) { s.disconnect(rank); }); })
      .def("close", &Core::close);

  // Static: the method descriptors keep pointers to them.
  static PyMethodDef rma_wait{"rma_wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&rma_entry<true>)),
                              METH_FASTCALL, "put/get with plain arguments, waited for; False: not taken (nothing sent)"};
  static PyMethodDef rma_start{"rma_start",
                               reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&rma_entry<false>)),
                               METH_FASTCALL, "put/get with plain arguments, started and progressed: True (done), "
                                              "an Op, or None (not taken, nothing sent)"};
  add_fast_method(core, &rma_wait);
  add_fast_method(core, &rma_start);

  m.def("memory_available", [](int type, int device_id) {
    std::string why;
    const bool ok = hmc::Memory::available(static_cast<hmc::MemoryType>(type), device_id, &why);
    return py::make_tuple(ok, why);
  });
  m.attr("MAX_NUM_CHS") = kMaxNumChs;
  m.def("set_log_level", [](int level) { hmc::runtime::set_log_level(static_cast<hmc::runtime::LogLevel>(level)); });
  m.def("log_level", [] { return static_cast<int>(hmc::runtime::log_level()); });
  m.def("set_log_queue", &set_log_queue, py::arg("queue").none(true));

  void bind_world(py::module_&); bind_world(m);  // the world layer: python/src/world_bindings.cpp
}
