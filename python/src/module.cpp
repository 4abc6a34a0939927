// The _hmc extension: thin bindings of hmc::Session and the world layer for the `hmc` Python
// package. The Python layer (python/hmc/) validates arguments and adds the reference API, asyncio
// and payloads.
#include "bindings.hpp"

PYBIND11_MODULE(_hmc, m) {
  m.doc() = "HMC core bindings; use the `hmc` package";
  hmc::python::register_error_translator();
  hmc::python::bind_kv_layout(m);
  hmc::python::bind_session(m);
  hmc::python::bind_logging(m);
  hmc::python::bind_store(m);
  bind_world(m);
  hmc::python::bind_transfer_engine(m);
}
