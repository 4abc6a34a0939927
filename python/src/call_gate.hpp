#pragma once
// Counts the calls inside a SessionHandle (many with the GIL released) so that close() can refuse new ones,
// wait for those in flight, and only then destroy the Session they use.
#include <condition_variable>
#include <mutex>

namespace hmc::python {

class CallGate {
 public:
  // False once closing started: the caller raises ClosedError.
  bool enter() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closing_) return false;
    ++active_;
    return true;
  }

  void leave() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (--active_ == 0) idle_.notify_all();
  }

  // True for the one caller that starts closing; later callers get false.
  bool begin_close() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closing_) return false;
    closing_ = true;
    return true;
  }

  // Blocks until no call is in flight (call with the GIL released).
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return active_ == 0; });
  }

  // Closing finished (the Session is gone); waiters of a concurrent close() wake up.
  void set_closed() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    idle_.notify_all();
  }

  void wait_closed() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return closed_; });
  }

  bool closed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return closed_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  int active_ = 0;
  bool closing_ = false;
  bool closed_ = false;
};

}  // namespace hmc::python
