#pragma once
// An (N, 3) integer array (NumPy, anything with the buffer protocol) read as N segments, with no
// Python object per segment.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "hmc/segment.hpp"

namespace hmc::python {

// Rows are (local_off, remote_off, nbytes). InvalidArgumentError for any other shape, a type that
// is not an integer, a byte order not this machine's, or a negative value (naming its row).
std::vector<Segment> segments_from_array(const pybind11::buffer& array);

// A 1-D integer array of block ids, with the same refusals; `name` names it in them.
std::vector<std::uint64_t> ids_from_array(const pybind11::buffer& array, const char* name);

}  // namespace hmc::python
