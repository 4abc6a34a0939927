#pragma once
// put_remote / get_remote's entries, SessionHandle.rma_wait and SessionHandle.rma_start, as plain
// METH_FASTCALL methods: pybind11's dispatcher costs about 0.3 us, a sixth of a whole shm put.
#include <pybind11/pybind11.h>

namespace hmc::python {

// Adds rma_wait and rma_start to the bound SessionHandle class.
void add_fast_calls(pybind11::handle session_handle_class);

}  // namespace hmc::python
