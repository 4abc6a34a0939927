#pragma once
// One collective or transfer submitted from Python (WorldOp), and the zero-copy buffers its result
// comes in (ByteVector, PyBlocks).
#include <pybind11/pybind11.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "buffer_view.hpp"
#include "completion_queue.hpp"
#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/world/world.hpp"
#include "world_options.hpp"

namespace hmc::python {

namespace py = pybind11;

// Bytes owned by C++ and lent to Python through the buffer protocol (NumPy views them, no copy).
struct ByteVector {
  std::vector<std::byte> data;
};

struct PyBlocks {
  Blocks blocks;
};

inline py::buffer_info bytes_info(std::vector<std::byte>& v) {
  return py::buffer_info(v.data(), 1, py::format_descriptor<std::uint8_t>::format(), 1, {v.size()}, {1});
}

// One collective submitted from Python: completed on the loop thread (no GIL), waited for with the
// GIL released, or announced to asyncio through the world's completion queue.
class WorldOp {
 public:
  WorldOp(std::uint64_t id, std::shared_ptr<CompletionQueue> queue) : id_(id), queue_(std::move(queue)) {}

  std::uint64_t id() const { return id_; }

  void complete(std::exception_ptr e, detail::CollectiveResult r) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::move(e);
      result_ = std::move(r);
      done_ = true;
    }
    cv_.notify_all();
    if (queue_) queue_->push(id_);
  }

  bool done() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

  // timeout None: without limit; inf or years saturate (Op::wait's rule), NaN and negatives are refused.
  bool wait(Seconds timeout) {
    std::optional<std::chrono::milliseconds> limit;
    if (timeout) {
      limit = runtime::seconds_to_ms(*timeout);
      if (!limit) throw InvalidArgumentError("timeout must be a number of seconds >= 0 (None: without limit)");
    }
    py::gil_scoped_release release;
    std::unique_lock<std::mutex> lock(mutex_);
    if (!limit) {
      cv_.wait(lock, [&] { return done_; });
      return true;
    }
    return cv_.wait_until(lock, runtime::deadline_after(*limit), [&] { return done_; });
  }

  // None, a ByteVector (broadcast, scatter) or Blocks; raises the collective's error. Releases the
  // Python objects the collective read or wrote.
  py::object result(const char* shape) {
    if (!done()) throw InvalidArgumentError("result() before the collective completed: wait() first");
    views_.clear();
    keep_ = py::none();
    if (error_) std::rethrow_exception(error_);
    const std::string s = shape;
    if (s == "bytes") return py::cast(ByteVector{std::move(result_.bytes)});
    if (s == "blocks") return py::cast(PyBlocks{std::move(result_.blocks)});
    return py::none();
  }

  // Inputs and outputs the collective uses: held until it completes.
  std::span<const std::byte> hold_in(py::handle obj, const char* role) {
    views_.push_back(std::make_unique<BufferView>(obj, false, role));
    return {static_cast<const std::byte*>(views_.back()->data()), views_.back()->size()};
  }
  std::span<std::byte> hold_out(py::handle obj, const char* role) {
    views_.push_back(std::make_unique<BufferView>(obj, true, role));
    return {static_cast<std::byte*>(views_.back()->data()), views_.back()->size()};
  }
  void keep(py::object o) { keep_ = std::move(o); }

 private:
  const std::uint64_t id_;
  const std::shared_ptr<CompletionQueue> queue_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  detail::CollectiveResult result_;
  std::vector<std::unique_ptr<BufferView>> views_;
  py::object keep_ = py::none();
};

}  // namespace hmc::python
