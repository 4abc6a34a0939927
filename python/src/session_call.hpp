#pragma once
// One call in flight inside a SessionHandle: the Session stays alive until it ends (close() waits).
#include "call_gate.hpp"
#include "hmc/session.hpp"

namespace hmc::python {

class SessionCall {
 public:
  // `gate` was entered by the caller; the destructor leaves it.
  SessionCall(CallGate& gate, Session* session) : gate_(gate), session_(session) {}
  SessionCall(const SessionCall&) = delete;
  SessionCall& operator=(const SessionCall&) = delete;
  ~SessionCall() { gate_.leave(); }
  Session& operator*() const { return *session_; }
  Session* operator->() const { return session_; }

 private:
  CallGate& gate_;
  Session* session_;
};

}  // namespace hmc::python
