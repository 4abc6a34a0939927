#pragma once
// Session members other branches add (COORDINATION.md): the SDK-form init_server/connect, rank(),
// close_server() (ctrl) and resolve_peer() (engine). Until they are merged the SDK form raises
// UnsupportedError naming what is missing, close_server() closes the whole session and peers are
// resolved through rank_of/ranks_at; once they are, the same code calls them. After the merge
// this header collapses into direct calls in module.cpp.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hmc/error.hpp"
#include "hmc/session.hpp"

namespace hmc::python::pending {

[[noreturn]] inline void missing(const std::string& what) {
  throw UnsupportedError(what + " is not in this build yet (it arrives with the control-channel/engine work)");
}

// Which of them this build has (hmc._hmc.features, for tests and users).
template <class S = Session>
bool has_sdk_form() {
  return requires(S& s, const std::string& ip, std::uint16_t port, ConnType conn) {
    s.init_server(ip, port);
    s.connect(ip, port, conn);
    s.rank();
  };
}
template <class S = Session>
bool has_close_server() {
  return requires(S& s) { s.close_server(); };
}
template <class S = Session>
bool has_resolve_peer() {
  return requires(const S& s, const std::string& ip, std::optional<std::uint16_t> port) { s.resolve_peer(ip, port); };
}

template <class S = Session>
void init_server(S& s, const std::string& ip, std::uint16_t ctrl_port) {
  if constexpr (requires { s.init_server(ip, ctrl_port); })
    s.init_server(ip, ctrl_port);
  else
    missing("init_server(ip, port): the SDK form with assigned ranks");
}

template <class S = Session>
std::uint32_t connect(S& s, const std::string& ip, std::uint16_t ctrl_port, ConnType conn) {
  if constexpr (requires { { s.connect(ip, ctrl_port, conn) } -> std::convertible_to<std::uint32_t>; })
    return s.connect(ip, ctrl_port, conn);
  else
    missing("connect(ip, port): the SDK form with assigned ranks");
}

template <class S = Session>
std::optional<std::uint32_t> rank(const S& s) {
  if constexpr (requires { { s.rank() } -> std::convertible_to<std::uint32_t>; })
    return s.rank();
  else
    return std::nullopt;
}

template <class S = Session>
void close_server(S& s) {
  if constexpr (requires { s.close_server(); })
    s.close_server();
  else
    s.close();  // until then the old meaning: the whole session
}

// The rank at (ip, data_port) or the only one at ip; NotConnectedError or InvalidArgumentError.
// Before the engine's resolve_peer: the same contract from rank_of/ranks_at (stale entries may stay).
template <class S = Session>
std::uint32_t resolve_peer(const S& s, const std::string& ip, std::optional<std::uint16_t> port) {
  if constexpr (requires { { s.resolve_peer(ip, port) } -> std::convertible_to<std::uint32_t>; }) {
    return s.resolve_peer(ip, port);
  } else {
    const std::string where = ip + (port ? ":" + std::to_string(*port) : std::string());
    if (port) {  // rank_of keeps entries of peers that are gone: operations to them fail NotConnectedError
      try {
        return s.rank_of(ip, *port);
      } catch (const NotFoundError&) {
        throw NotConnectedError("no peer connected at " + where);
      }
    }
    const std::vector<std::uint32_t> ranks = s.ranks_at(ip);
    if (ranks.empty()) throw NotConnectedError("no peer connected at " + where);
    if (ranks.size() > 1) {
      std::string names;
      for (const auto r : ranks) names += (names.empty() ? "" : ", ") + std::to_string(r);
      throw InvalidArgumentError(std::to_string(ranks.size()) + " peers at " + ip + " (ranks " + names +
                                 "): pass 'ip:port', (ip, port) or the rank");
    }
    return ranks.front();
  }
}

}  // namespace hmc::python::pending
