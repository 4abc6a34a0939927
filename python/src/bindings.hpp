#pragma once
// What module.cpp's PYBIND11_MODULE calls: each part of _hmc registers itself.
#include <pybind11/pybind11.h>

namespace hmc::python {

// The one place C++ errors become Python exceptions (error_translation.cpp).
void register_error_translator();
// SessionHandle, Op, Registered, CompletionQueue and the memory queries (session_bindings.cpp).
void bind_session(pybind11::module_& m);
// Log level and the queue that carries C++ log lines to a Python logger (log_bindings.cpp).
void bind_logging(pybind11::module_& m);
// Store and StoreServer (store_bindings.cpp).
void bind_store(pybind11::module_& m);
// TransferEngine (transfer_engine_bindings.cpp).
void bind_transfer_engine(pybind11::module_& m);
// KvLayout (kv_layout_bindings.cpp).
void bind_kv_layout(pybind11::module_& m);

}  // namespace hmc::python

// World, its operations and their result buffers (world_bindings.cpp).
void bind_world(pybind11::module_& m);
