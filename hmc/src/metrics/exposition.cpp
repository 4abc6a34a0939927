#include "metrics/exposition.hpp"

#include <cstdint>
#include <functional>

namespace hmc::detail {

namespace {
using Sessions = std::vector<std::pair<std::string, SessionStats>>;

// Label values are escaped as the format asks (backslash, quote, newline).
std::string quoted(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

struct Kind {
  const char* name;
  const OpStats SessionStats::*stats;
};
constexpr Kind kKinds[] = {{"put", &SessionStats::put},
                           {"get", &SessionStats::get},
                           {"put_batch", &SessionStats::put_batch},
                           {"get_batch", &SessionStats::get_batch},
                           {"put_notify", &SessionStats::put_notify},
                           {"message", &SessionStats::message}};

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, std::uint64_t v) {
  out += name + "{" + labels + "} " + std::to_string(v) + "\n";
}
}  // namespace

std::string exposition(const Sessions& sessions) {
  std::string out;
  family(out, "hmc_operations_total", "counter", "Operations that ended, by kind and outcome.");
  for (const auto& [session, s] : sessions)
    for (const Kind& k : kKinds) {
      const OpStats& o = s.*(k.stats);
      const std::string l = "session=" + quoted(session) + ",kind=\"" + k.name + "\",outcome=";
      sample(out, "hmc_operations_total", l + "\"done\"", o.done);
      sample(out, "hmc_operations_total", l + "\"failed\"", o.failed);
      sample(out, "hmc_operations_total", l + "\"timed_out\"", o.timed_out);
      sample(out, "hmc_operations_total", l + "\"aborted\"", o.aborted);
    }
  family(out, "hmc_bytes_total", "counter", "Bytes moved by the operations done, by kind.");
  for (const auto& [session, s] : sessions)
    for (const Kind& k : kKinds)
      sample(out, "hmc_bytes_total", "session=" + quoted(session) + ",kind=\"" + k.name + "\"", (s.*(k.stats)).bytes);
  family(out, "hmc_operation_latency_microseconds", "histogram",
         "Latency of sampled operations (one in 16), submission to end, by kind.");
  for (const auto& [session, s] : sessions)
    for (const Kind& k : kKinds) {
      const OpStats& o = s.*(k.stats);
      const std::string l = "session=" + quoted(session) + ",kind=\"" + k.name + "\"";
      std::uint64_t seen = 0;
      for (std::size_t i = 0; i + 1 < OpStats::kBuckets; ++i) {
        seen += o.latency_us[i];
        sample(out, "hmc_operation_latency_microseconds_bucket",
               l + ",le=\"" + std::to_string(std::uint64_t{1} << i) + "\"", seen);
      }
      seen += o.latency_us[OpStats::kBuckets - 1];
      sample(out, "hmc_operation_latency_microseconds_bucket", l + ",le=\"+Inf\"", seen);
      sample(out, "hmc_operation_latency_microseconds_sum", l, o.latency_sum_us);
      sample(out, "hmc_operation_latency_microseconds_count", l, seen);
    }
  family(out, "hmc_operations_in_flight", "gauge", "Operations not ended yet.");
  for (const auto& [session, s] : sessions)
    sample(out, "hmc_operations_in_flight", "session=" + quoted(session), s.in_flight);
  family(out, "hmc_peers_connected", "gauge", "Peers with a data connection.");
  for (const auto& [session, s] : sessions)
    sample(out, "hmc_peers_connected", "session=" + quoted(session), s.peers_connected);
  family(out, "hmc_peers_lost_total", "counter", "Peers lost since the session started.");
  for (const auto& [session, s] : sessions)
    sample(out, "hmc_peers_lost_total", "session=" + quoted(session), s.peers_lost);
  family(out, "hmc_ctrl_messages_total", "counter", "Messages over the control channel's sockets, by direction.");
  for (const auto& [session, s] : sessions) {
    sample(out, "hmc_ctrl_messages_total", "session=" + quoted(session) + ",direction=\"sent\"", s.ctrl.messages_sent);
    sample(out, "hmc_ctrl_messages_total", "session=" + quoted(session) + ",direction=\"received\"",
           s.ctrl.messages_received);
  }
  family(out, "hmc_ctrl_bytes_total", "counter", "Message bytes over the control channel's sockets, by direction.");
  for (const auto& [session, s] : sessions) {
    sample(out, "hmc_ctrl_bytes_total", "session=" + quoted(session) + ",direction=\"sent\"", s.ctrl.bytes_sent);
    sample(out, "hmc_ctrl_bytes_total", "session=" + quoted(session) + ",direction=\"received\"",
           s.ctrl.bytes_received);
  }
  family(out, "hmc_handshakes_refused_total", "counter", "Control-channel handshakes this server refused, by reason.");
  for (const auto& [session, s] : sessions) {
    const std::string l = "session=" + quoted(session) + ",reason=";
    sample(out, "hmc_handshakes_refused_total", l + "\"auth\"", s.ctrl.refused_auth);
    sample(out, "hmc_handshakes_refused_total", l + "\"rank\"", s.ctrl.refused_rank);
    sample(out, "hmc_handshakes_refused_total", l + "\"busy\"", s.ctrl.refused_busy);
    sample(out, "hmc_handshakes_refused_total", l + "\"protocol\"", s.ctrl.refused_protocol);
    sample(out, "hmc_handshakes_refused_total", l + "\"transport\"", s.ctrl.refused_transport);
    sample(out, "hmc_handshakes_refused_total", l + "\"timeout\"", s.ctrl.refused_timeout);
  }
  family(out, "hmc_staging_copies_total", "counter", "Copies between device memory and pinned host buffers.");
  for (const auto& [session, s] : sessions)
    sample(out, "hmc_staging_copies_total", "session=" + quoted(session), s.staging.copies);
  family(out, "hmc_staging_bytes_total", "counter", "Bytes copied between device memory and pinned host buffers.");
  for (const auto& [session, s] : sessions)
    sample(out, "hmc_staging_bytes_total", "session=" + quoted(session), s.staging.bytes);
  family(out, "hmc_peer_bytes_total", "counter", "Bytes to and from a connected peer, by direction.");
  for (const auto& [session, s] : sessions)
    for (const PeerStats& p : s.peers) {
      const std::string l = "session=" + quoted(session) + ",peer=\"" + std::to_string(p.rank) + "\",direction=";
      sample(out, "hmc_peer_bytes_total", l + "\"put\"", p.put_bytes);
      sample(out, "hmc_peer_bytes_total", l + "\"get\"", p.get_bytes);
      sample(out, "hmc_peer_bytes_total", l + "\"message\"", p.message_bytes);
    }
  family(out, "hmc_peer_transport_info", "gauge", "The transport carrying a connected peer's data (always 1).");
  for (const auto& [session, s] : sessions)
    for (const PeerStats& p : s.peers)
      sample(out, "hmc_peer_transport_info",
             "session=" + quoted(session) + ",peer=\"" + std::to_string(p.rank) + "\",transport=" + quoted(p.transport),
             1);
  return out;
}

}  // namespace hmc::detail
