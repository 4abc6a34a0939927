#pragma once
// Python dicts of world, transfer-engine and store options made into their C++ options, and
// timeouts in seconds made into milliseconds (shared by world_bindings, transfer_engine_bindings and
// store_bindings).
#include <pybind11/pybind11.h>

#include <chrono>
#include <optional>

#include "hmc/store/store.hpp"
#include "hmc/world/world.hpp"

namespace hmc::python {

using Seconds = std::optional<double>;

// None: 0, "the world's/store's own timeout"; otherwise at least 1 ms. InvalidArgumentError for NaN
// and negatives.
std::chrono::milliseconds to_ms(Seconds s);
// The keys hmc.World and hmc.TransferEngine accept; InvalidArgumentError for any other.
WorldOptions world_options(const pybind11::dict& d);
StoreOptions store_options(const pybind11::dict& d);
// A store's TLS settings from a dict (cert, key or key_pem, key_password, ca, crl; ca and crl a path
// or a list of paths); None or an empty dict: none. InvalidArgumentError for anything else.
TlsOptions tls_options(const pybind11::handle& h);

}  // namespace hmc::python
