#pragma once
// Session::stats() as a dict of plain Python numbers and strings (sess.stats(), world.stats()).
#include <pybind11/pybind11.h>

#include "hmc/session_stats.hpp"

namespace hmc::python {

pybind11::dict stats_dict(const SessionStats& s);

}  // namespace hmc::python
