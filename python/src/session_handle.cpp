#include "session_handle.hpp"

#include <mutex>
#include <string>
#include <utility>

#include "buffer_view.hpp"
#include "hmc/memory.hpp"
#include "segment_array.hpp"

namespace hmc::python {
namespace {

// A control message from a Python int (a tag) or anything with the buffer protocol (bytes).
CtrlMessage message_of(const py::object& value, const char* what) {
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

}  // namespace

SessionHandle::SessionHandle(SessionOptions options) {
  py::gil_scoped_release release;
  session_ = std::make_unique<Session>(std::move(options));
  lifetime_->session = session_.get();
  lifetime_->caller_driven = session_->options().progress_thread != ProgressThread::own;
}

std::vector<std::uint64_t> SessionHandle::progress(bool soon) {
  {
    SessionCall s = use();
    queue_->collect_here();
    struct Stop {
      CompletionQueue& q;
      ~Stop() { q.stop_collecting(); }
    } stop{*queue_};
    // One pass (EventLoop::poll): what is ready, every completion in it, one cycle per poller;
    // a poller that spins cycles again in asyncio's next turn (set_soon's hook, else the wakeup fd).
    if (soon) driver_.hook_pass_began();
    driver_.poll_here(*s, {});
  }
  driver_.ask_soon();
  return drain();
}

template <class Start>
Op SessionHandle::submit(bool notify, py::object keep, std::shared_ptr<void> pin, Start start) {
  auto completion = std::make_shared<OpCompletion>();
  const bool started_here = notify && driver_.on_selector_thread();
  {
    SessionCall s = use();
    if (started_here) {
      driver_.start_here(*s, lifetime_, *queue_, completion, std::move(start));
    } else {
      if (notify) completion->notify(queue_);
      start(*s, completion);
    }
  }
  // Done inside its own pass: Python settles it at once, no queue entry (and no completion-fd write).
  if (notify && started_here && !completion->done()) completion->notify(queue_);
  graveyard_->collect();
  driver_.ask_soon();
  return Op(std::move(completion), graveyard_, std::move(keep), std::move(pin), lifetime_);
}

Op SessionHandle::rma(bool is_put, std::uint32_t rank, std::size_t local, std::size_t remote, std::size_t n,
                      bool notify) {
  return submit(notify, py::none(), nullptr, [=](Session& s, const std::shared_ptr<OpCompletion>& c) {
    is_put ? s.async_put(rank, local, remote, n, completer(c)) : s.async_get(rank, local, remote, n, completer(c));
  });
}

Op SessionHandle::batch(bool is_put, std::uint32_t rank,
                        const std::vector<std::tuple<std::size_t, std::size_t, std::size_t>>& segs, bool notify,
                        py::object tag) {
  std::vector<Segment> v;
  v.reserve(segs.size());
  for (const auto& [l, r, n] : segs) v.push_back(Segment{l, r, n});
  return batch_of(is_put, rank, std::move(v), notify, tag);
}

Op SessionHandle::batch_array(bool is_put, std::uint32_t rank, const py::buffer& segs, bool notify, py::object tag) {
  return batch_of(is_put, rank, segments_from_array(segs), notify, tag);
}

Op SessionHandle::blocks(bool is_put, std::uint32_t rank, const KvLayout& local, const py::buffer& src_ids,
                         const KvLayout& remote, const py::buffer& dst_ids, const py::object& mem, bool notify,
                         py::object tag) {
  const std::vector<std::uint64_t> src = ids_from_array(src_ids, "src_ids");
  const std::vector<std::uint64_t> dst = ids_from_array(dst_ids, "dst_ids");
  if (mem.is_none()) {
    // A put's sources are local blocks, a get's are the peer's.
    return batch_of(is_put, rank,
                    is_put ? local.segments_to(remote, src, dst, "src_ids", "dst_ids")
                           : local.segments_to(remote, dst, src, "dst_ids", "src_ids"),
                    notify, tag);
  }
  std::shared_ptr<RegHolder> holder = mem.cast<const Registered&>().holder();
  // The ids are checked here, on the caller's thread: a bad one raises before anything is submitted.
  (void)(is_put ? local.segments_to(remote, src, dst, "src_ids", "dst_ids")
                : local.segments_to(remote, dst, src, "dst_ids", "src_ids"));
  std::optional<CtrlMessage> m;
  if (!tag.is_none()) m = message_of(tag, "notify");
  return submit(notify, py::none(), holder,
                [=, m = std::move(m)](Session& s, const std::shared_ptr<OpCompletion>& c) mutable {
                  if (m)
                    return s.async_put_blocks_from_notify(holder->memory, rank, local, src, remote, dst, std::move(*m),
                                                          completer(c));
                  is_put ? s.async_put_blocks_from(holder->memory, rank, local, src, remote, dst, completer(c))
                         : s.async_get_blocks_into(holder->memory, rank, local, src, remote, dst, completer(c));
                });
}

Op SessionHandle::batch_of(bool is_put, std::uint32_t rank, std::vector<Segment> segs, bool notify,
                           const py::object& tag) {
  if (!tag.is_none()) {
    CtrlMessage m = message_of(tag, "notify");
    return submit(
        notify, py::none(), nullptr,
        [=, v = std::move(segs), m = std::move(m)](Session& s, const std::shared_ptr<OpCompletion>& c) mutable {
          s.async_put_batch_notify(rank, std::move(v), std::move(m), completer(c));
        });
  }
  return submit(notify, py::none(), nullptr,
                [=, v = std::move(segs)](Session& s, const std::shared_ptr<OpCompletion>& c) mutable {
                  is_put ? s.async_put_batch(rank, std::move(v), completer(c))
                         : s.async_get_batch(rank, std::move(v), completer(c));
                });
}

Op SessionHandle::pipeline(bool is_put, std::uint32_t rank, std::size_t local, std::size_t remote, std::size_t n,
                           std::size_t chunk, std::size_t window, bool notify) {
  return submit(notify, py::none(), nullptr, [=](Session& s, const std::shared_ptr<OpCompletion>& c) {
    is_put ? s.async_put_pipeline(rank, local, remote, n, chunk, window, completer(c))
           : s.async_get_pipeline(rank, local, remote, n, chunk, window, completer(c));
  });
}

Op SessionHandle::registered(bool is_put, const Registered& reg, std::size_t off, std::uint32_t rank,
                             std::size_t remote, std::size_t n, bool notify) {
  std::shared_ptr<RegHolder> holder = reg.holder();
  return submit(notify, py::none(), holder, [=](Session& s, const std::shared_ptr<OpCompletion>& c) {
    is_put ? s.async_put_from(holder->memory, off, rank, remote, n, completer(c))
           : s.async_get_into(holder->memory, off, rank, remote, n, completer(c));
  });
}

Registered SessionHandle::register_memory(py::object obj, int mem_type, std::uintptr_t device_ptr, std::size_t nbytes) {
  auto holder = std::make_shared<RegHolder>(lifetime_, obj);
  void* data = reinterpret_cast<void*>(device_ptr);
  std::size_t size = nbytes;
  if (device_ptr == 0) {
    holder->view = std::make_unique<BufferView>(obj, /*writable=*/false, "register");
    data = holder->view->data();
    size = holder->view->size();
  }
  SessionCall s = use();
  holder->memory = s->register_memory(data, size, static_cast<MemoryType>(mem_type));
  return Registered(std::move(holder));
}

Op SessionHandle::put_notify(std::uint32_t rank, std::size_t local, std::size_t remote, std::size_t n, py::object tag,
                             bool notify) {
  CtrlMessage m = message_of(tag, "notify");
  return submit(notify, py::none(), nullptr,
                [=, m = std::move(m)](Session& s, const std::shared_ptr<OpCompletion>& c) mutable {
                  s.async_put_notify(rank, local, remote, n, std::move(m), completer(c));
                });
}

Op SessionHandle::registered_put_notify(const Registered& reg, std::size_t off, std::uint32_t rank, std::size_t remote,
                                        std::size_t n, py::object tag, bool notify) {
  CtrlMessage m = message_of(tag, "notify");
  std::shared_ptr<RegHolder> holder = reg.holder();
  return submit(notify, py::none(), holder,
                [=, m = std::move(m)](Session& s, const std::shared_ptr<OpCompletion>& c) mutable {
                  s.async_put_from_notify(holder->memory, off, rank, remote, n, std::move(m), completer(c));
                });
}

Op SessionHandle::ctrl_send(std::uint32_t rank, py::object value, bool notify) {
  CtrlMessage m = message_of(value, "ctrl_send");
  return submit(notify, py::none(), nullptr,
                [rank, m = std::move(m)](Session& s, const std::shared_ptr<OpCompletion>& c) mutable {
                  s.async_ctrl_send(rank, std::move(m), completer(c));
                });
}

Op SessionHandle::ctrl_recv(std::uint32_t rank, Seconds timeout, bool notify) {
  auto signal = std::make_shared<runtime::asio::cancellation_signal>();
  runtime::loop_executor ex = use()->executor();  // valid while the gate admits calls
  const auto t = to_ms(timeout, use()->options().timeout, "timeout");
  Op op = submit(notify, py::none(), nullptr, [rank, t, signal](Session& s, const std::shared_ptr<OpCompletion>& c) {
    s.async_ctrl_recv(
        rank, t,
        runtime::asio::bind_cancellation_slot(signal->slot(), [c, signal](std::exception_ptr e, CtrlMessage m) {
          c->complete(e, e ? std::nullopt : std::optional<CtrlMessage>(std::move(m)));
        }));
  });
  // Cancellation slots are not thread-safe: emit on the session's loop, where the receive waits.
  op.set_cancel([lifetime = lifetime_, ex, signal] {
    if (!lifetime->gate.enter()) return;  // closed: the receive has already failed
    // post_to_loop: a caller-driven loop's wakeup fd tells its driver (asyncio) of it
    runtime::post_to_loop(ex, [signal] { signal->emit(runtime::asio::cancellation_type::terminal); });
    lifetime->gate.leave();
  });
  return op;
}

Op SessionHandle::wait_notify(std::uint32_t rank, std::uint64_t tag, std::uint64_t count, Seconds timeout,
                              bool notify) {
  const auto t = to_ms(timeout, use()->options().timeout, "timeout");
  return submit(notify, py::none(), nullptr, [=](Session& s, const std::shared_ptr<OpCompletion>& c) {
    s.async_wait_notify(rank, tag, count, t, completer(c));
  });
}

std::size_t SessionHandle::write(py::handle obj, std::size_t offset) {
  BufferView v(obj, false, "buffer put");
  SessionCall s = use();
  py::gil_scoped_release release;
  s->buffer().write_from_cpu(v.data(), v.size(), offset);
  return v.size();
}

std::size_t SessionHandle::read_into(py::handle obj, std::optional<std::size_t> nbytes, std::size_t offset) {
  BufferView v(obj, true, "buffer get_into");
  const std::size_t n = nbytes.value_or(v.size());
  if (n > v.size())
    throw InvalidArgumentError("get_into: nbytes " + std::to_string(n) + " exceeds the destination's " +
                               std::to_string(v.size()) + " bytes");
  SessionCall s = use();
  py::gil_scoped_release release;
  s->buffer().read_to_cpu(v.data(), n, offset);
  return n;
}

py::bytes SessionHandle::read_bytes(std::size_t offset, std::size_t n) {
  SessionCall s = use();
  s->buffer().check_range(offset, n);
  std::string out(n, '\0');
  {
    py::gil_scoped_release release;
    s->buffer().read_to_cpu(out.data(), n, offset);
  }
  return py::bytes(out);
}

void SessionHandle::copy_ptr(bool into_buffer, std::uintptr_t ptr, std::size_t n, std::size_t offset, int mem_type,
                             int device_id) {
  if (ptr == 0) throw InvalidArgumentError("the pointer is null");
  const auto type = static_cast<MemoryType>(mem_type);
  const bool host = type == MemoryType::CPU || type == MemoryType::DEFAULT;
  std::unique_ptr<Memory> gpu = host ? nullptr : Memory::create(type, device_id);
  SessionCall s = use();
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

void SessionHandle::copy_within(std::size_t dst, std::size_t src, std::size_t n) {
  SessionCall s = use();
  py::gil_scoped_release release;
  s->buffer().copy_within(dst, src, n);
}

void SessionHandle::close() {
  if (!lifetime_->gate.begin_close()) {
    py::gil_scoped_release release;
    lifetime_->gate.wait_closed();
    return;
  }
  {
    py::gil_scoped_release release;
    session_->close();
    lifetime_->gate.wait_idle();
    session_.reset();
  }
  std::vector<RegisteredMemory> orphans;
  {
    std::lock_guard<std::mutex> lock(lifetime_->mutex);
    lifetime_->session_gone = true;
    orphans.swap(lifetime_->orphans);
  }
  orphans.clear();  // the Session is gone: nothing left to unregister from
  graveyard_->clear();
  lifetime_->gate.set_closed();
}

}  // namespace hmc::python
