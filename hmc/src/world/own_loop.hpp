#pragma once
// The world layer waits on futures for work on its session's loop (call_on) without driving it.
#include "hmc/session.hpp"

namespace hmc::detail {

// A World's or TransferEngine's session options: always a dedicated loop thread, whatever was asked.
inline SessionOptions with_own_loop(SessionOptions o) {
  o.progress_thread = ProgressThread::own;
  return o;
}

}  // namespace hmc::detail
