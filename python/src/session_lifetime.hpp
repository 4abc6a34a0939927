#pragma once
// What a SessionHandle shares with the registrations and operations that may outlive its calls:
// the gate every use of the Session enters, and the registrations released while it closes.
#include <mutex>
#include <vector>

#include "call_gate.hpp"
#include "hmc/registered_memory.hpp"
#include "hmc/session.hpp"

namespace hmc::python {

struct SessionLifetime {
  CallGate gate;
  std::mutex mutex;
  bool session_gone = false;
  std::vector<RegisteredMemory> orphans;  // released while closing: dropped after the Session
  Session* session = nullptr;             // valid inside gate.enter() / leave()
  bool caller_driven = false;             // ProgressThread::caller or shared: waits drive the loop
};

}  // namespace hmc::python
