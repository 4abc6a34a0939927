// The fast path takes the caller's arguments as they are and uses them only when each is plain;
// for anything else it sends nothing and says so, and the Python layer checks the arguments on
// the general path (_args, which raises the typed errors).
#include "fast_call.hpp"

#include <cstdint>
#include <optional>
#include <string>

#include "session_handle.hpp"

namespace hmc::python {
namespace {

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

// The rank of a plain peer; nullopt when no peer holds the address (the general path waits for
// it on a serving session, or raises) or on any other error (the general path raises it).
std::optional<std::uint32_t> rank_of(Session& s, const PlainRma& a) {
  if (a.ip.empty()) return a.rank;
  try {
    return s.resolve_peer(a.ip, a.port);
  } catch (const Error&) {
    return std::nullopt;
  }
}

// Errors become Python exceptions through pybind11's translators (error_translation.cpp's included).
template <bool Wait>
PyObject* rma_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs) noexcept {
  try {
    if (nargs != 6) throw py::type_error("(is_put, peer, port, local_off, remote_off, nbytes) expected");
    SessionHandle& handle = py::handle(self).cast<SessionHandle&>();
    const bool is_put = args[0] == Py_True;
    if constexpr (Wait) {
      return py::bool_(handle.rma_wait(is_put, args[1], args[2], args[3], args[4], args[5])).release().ptr();
    } else {
      return handle.rma_start(is_put, args[1], args[2], args[3], args[4], args[5]).release().ptr();
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

}  // namespace

// A blocking Session's put_remote / get_remote in one call: submits and waits as Session::put /
// get do (GIL released; a caller-driven session is driven by this thread meanwhile), raising the
// operation's error. False, with nothing sent, when an argument is not plain.
bool SessionHandle::rma_wait(bool is_put, py::handle peer, py::handle port, py::handle local, py::handle remote,
                             py::handle size) {
  const auto a = plain_rma(peer, port, local, remote, size);
  if (!a) return false;
  graveyard_->collect();
  SessionCall s = use();
  py::gil_scoped_release release;
  const auto rank = rank_of(*s, *a);
  if (!rank) return false;
  s->check_conn(*rank, ConnType::UCX);  // the fast path is the default conn's
  is_put ? s->put(*rank, a->local, a->remote, a->size) : s->get(*rank, a->local, a->remote, a->size);
  return true;
}

// An AsyncSession's put_remote / get_remote in one call: submits and, on a caller-driven session,
// progresses until the operation is done (on shm it nearly always is). True when it completed
// without an error: no Op, no queue entry, no asyncio future. Else its Op (still running, or
// failed), which Python settles as any other; None, with nothing sent, when an argument is not plain.
py::object SessionHandle::rma_start(bool is_put, py::handle peer, py::handle port, py::handle local, py::handle remote,
                                    py::handle size) {
  const auto a = plain_rma(peer, port, local, remote, size);
  if (!a) return py::none();
  auto completion = std::make_shared<OpCompletion>();
  {
    SessionCall s = use();
    const auto rank = rank_of(*s, *a);
    if (!rank) return py::none();
    s->check_conn(*rank, ConnType::UCX);  // the fast path is the default conn's
    auto start = [is_put, rank = *rank, l = a->local, r = a->remote, n = a->size](
                     Session& session, const std::shared_ptr<OpCompletion>& c) {
      is_put ? session.async_put(rank, l, r, n, completer(c)) : session.async_get(rank, l, r, n, completer(c));
    };
    if (driver_.on_selector_thread()) {
      driver_.start_here(*s, lifetime_, *queue_, completion, std::move(start));
    } else {
      start(*s, completion);
      if (lifetime_->caller_driven) {
        try {
          s->progress([c = completion.get()] { return c->done(); });
        } catch (const ClosedError&) {  // close() is under way: it fails the operation, settled below
        }
      }
    }
  }
  graveyard_->collect();
  driver_.ask_soon();
  if (completion->succeeded()) return py::bool_(true);
  completion->notify(queue_);
  return py::cast(Op(std::move(completion), graveyard_, py::none(), nullptr, lifetime_));
}

void add_fast_calls(py::handle session_handle_class) {
  // Static: the method descriptors keep pointers to them.
  static PyMethodDef rma_wait{"rma_wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&rma_entry<true>)),
                              METH_FASTCALL,
                              "put/get with plain arguments, waited for; False: not taken (nothing sent)"};
  static PyMethodDef rma_start{
      "rma_start", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&rma_entry<false>)), METH_FASTCALL,
      "put/get with plain arguments, started and progressed: True (done), "
      "an Op, or None (not taken, nothing sent)"};
  add_fast_method(session_handle_class, &rma_wait);
  add_fast_method(session_handle_class, &rma_start);
}

}  // namespace hmc::python
