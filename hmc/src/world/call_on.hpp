#pragma once
// Blocking calls of the world layer into state that lives on a loop it does not own.
#include <future>

#include "hmc/runtime/async_op.hpp"

namespace hmc::detail {

// Runs f on the loop behind `ex` and returns its result (inline when already there).
template <class F>
auto call_on(runtime::loop_executor ex, F f) -> decltype(f()) {
  if (ex.running_in_this_thread()) return f();
  std::packaged_task<decltype(f())()> task(std::move(f));
  auto result = task.get_future();
  runtime::asio::post(ex, [&task] { task(); });
  return result.get();
}

}  // namespace hmc::detail
