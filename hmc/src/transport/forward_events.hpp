#pragma once
// The events of an inner transport, forwarded by a transport that carries each peer on one of
// several inner ones (RoutedTransport: UCX or TCP; MultiTransport: a plane per transport).
#include <map>

#include "hmc/status.hpp"
#include "transport/transport.hpp"

namespace hmc::detail {

// `route` maps each peer to what carries it; `inner` is known there as `self`. A peer that broke the
// protocol of any inner transport (its secret there names it) goes, whatever carries it; a plain
// failure and readiness count only from the one that carries it. A fast-path message is the peer's
// whichever transport received it. `outer` and `route` outlive `inner`'s callbacks.
template <class Key>
void forward_events(Transport& inner, Transport& outer, std::map<std::uint32_t, Key>& route, Key self) {
  inner.on_peer_failed = [&outer, &route, self](std::uint32_t rank, error_code reason) {
    auto it = route.find(rank);
    const bool carrier = it != route.end() && it->second == self;
    if (!carrier && it != route.end() && status_of(reason) != Status::PROTOCOL_ERROR) return;
    if (carrier) route.erase(it);
    if (outer.on_peer_failed) outer.on_peer_failed(rank, reason);
  };
  inner.on_peer_ready = [&outer, &route, self](std::uint32_t rank) {
    auto it = route.find(rank);
    if (it != route.end() && it->second == self && outer.on_peer_ready) outer.on_peer_ready(rank);
  };
  inner.on_message = [&outer](std::uint32_t rank, std::span<const std::byte> message) {
    if (outer.on_message) outer.on_message(rank, message);
  };
}

}  // namespace hmc::detail
