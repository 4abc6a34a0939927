#pragma once
// Element-wise reduction kernels for all_reduce.
#include <cstddef>

#include "hmc/world/collective.hpp"

namespace hmc::detail {

// acc[i] = op(acc[i], src[i]) for count elements of type t (acc and src may be unaligned).
void reduce_into(std::byte* acc, const std::byte* src, std::size_t count, DataType t, ReduceOp op);

}  // namespace hmc::detail
