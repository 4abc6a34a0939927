#include "stats_dict.hpp"

#include <pybind11/stl.h>

#include <vector>

namespace py = pybind11;

namespace hmc::python {

namespace {
// Session::stats() as plain Python numbers and strings.
py::dict op_stats(const OpStats& s) {
  py::dict latency;
  latency["p50"] = s.latency_quantile_us(0.5);
  latency["p99"] = s.latency_quantile_us(0.99);
  latency["p999"] = s.latency_quantile_us(0.999);
  latency["buckets"] = std::vector<std::uint64_t>(s.latency_us.begin(), s.latency_us.end());
  py::dict d;
  d["done"] = s.done;
  d["bytes"] = s.bytes;
  d["failed"] = s.failed;
  d["timed_out"] = s.timed_out;
  d["aborted"] = s.aborted;
  d["latency_us"] = latency;
  return d;
}

}  // namespace

py::dict stats_dict(const SessionStats& s) {
  py::dict ops;
  ops["put"] = op_stats(s.put);
  ops["get"] = op_stats(s.get);
  ops["put_batch"] = op_stats(s.put_batch);
  ops["get_batch"] = op_stats(s.get_batch);
  ops["put_notify"] = op_stats(s.put_notify);
  ops["message"] = op_stats(s.message);
  py::dict peers;
  for (const PeerStats& p : s.peers) {
    py::dict d;
    d["transport"] = p.transport;
    d["put_bytes"] = p.put_bytes;
    d["get_bytes"] = p.get_bytes;
    d["message_bytes"] = p.message_bytes;
    d["done"] = p.done;
    d["failed"] = p.failed;
    peers[py::int_(p.rank)] = d;
  }
  py::dict out;
  out["ops"] = ops;
  out["in_flight"] = s.in_flight;
  out["peers_connected"] = s.peers_connected;
  out["peers_lost"] = s.peers_lost;
  out["peers"] = peers;
  py::dict ctrl;
  ctrl["messages_sent"] = s.ctrl.messages_sent;
  ctrl["bytes_sent"] = s.ctrl.bytes_sent;
  ctrl["messages_received"] = s.ctrl.messages_received;
  ctrl["bytes_received"] = s.ctrl.bytes_received;
  py::dict refused;
  refused["auth"] = s.ctrl.refused_auth;
  refused["rank"] = s.ctrl.refused_rank;
  refused["busy"] = s.ctrl.refused_busy;
  refused["protocol"] = s.ctrl.refused_protocol;
  refused["transport"] = s.ctrl.refused_transport;
  refused["timeout"] = s.ctrl.refused_timeout;
  ctrl["handshakes_refused"] = refused;
  out["ctrl"] = ctrl;
  py::dict staging;
  staging["copies"] = s.staging.copies;
  staging["bytes"] = s.staging.bytes;
  out["staging"] = staging;
  return out;
}

}  // namespace hmc::python
