#include "world/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace hmc {

std::size_t size_of(DataType t) noexcept {
  switch (t) {
    case DataType::int8:
    case DataType::uint8: return 1;
    case DataType::int16:
    case DataType::uint16: return 2;
    case DataType::int32:
    case DataType::uint32:
    case DataType::float32: return 4;
    case DataType::int64:
    case DataType::uint64:
    case DataType::float64: return 8;
  }
  return 1;
}

std::string_view to_string(DataType t) noexcept {
  switch (t) {
    case DataType::int8: return "int8";
    case DataType::uint8: return "uint8";
    case DataType::int16: return "int16";
    case DataType::uint16: return "uint16";
    case DataType::int32: return "int32";
    case DataType::uint32: return "uint32";
    case DataType::int64: return "int64";
    case DataType::uint64: return "uint64";
    case DataType::float32: return "float32";
    case DataType::float64: return "float64";
  }
  return "?";
}

std::string_view to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

namespace detail {

const char* to_string(CollectiveCall::Kind k) noexcept {
  using K = CollectiveCall::Kind;
  switch (k) {
    case K::barrier: return "barrier";
    case K::broadcast: return "broadcast";
    case K::all_gather: return "all_gather";
    case K::all_gather_v: return "all_gather_v";
    case K::gather: return "gather";
    case K::scatter: return "scatter";
    case K::all_to_all: return "all_to_all";
    case K::all_to_all_v: return "all_to_all_v";
    case K::all_reduce: return "all_reduce";
  }
  return "?";
}

namespace {

// Chunks of elements copied into aligned locals so any alignment of the buffers is fine; the
// compiler vectorises the inner loops.
template <class T, class Op>
void apply(std::byte* acc, const std::byte* src, std::size_t count, Op op) {
  constexpr std::size_t kChunk = 1024;
  T a[kChunk];
  T b[kChunk];
  for (std::size_t i = 0; i < count; i += kChunk) {
    const std::size_t m = std::min(kChunk, count - i);
    std::memcpy(a, acc + i * sizeof(T), m * sizeof(T));
    std::memcpy(b, src + i * sizeof(T), m * sizeof(T));
    for (std::size_t k = 0; k < m; ++k) a[k] = op(a[k], b[k]);
    std::memcpy(acc + i * sizeof(T), a, m * sizeof(T));
  }
}

template <class T>
void reduce_typed(std::byte* acc, const std::byte* src, std::size_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      // Integers wrap like NumPy's and torch's sums (unsigned arithmetic: no undefined overflow).
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        return apply<T>(acc, src, count,
                        [](T x, T y) { return static_cast<T>(static_cast<U>(x) + static_cast<U>(y)); });
      } else {
        return apply<T>(acc, src, count, [](T x, T y) { return x + y; });
      }
    case ReduceOp::max: return apply<T>(acc, src, count, [](T x, T y) { return y > x ? y : x; });
    case ReduceOp::min: return apply<T>(acc, src, count, [](T x, T y) { return y < x ? y : x; });
  }
}

}  // namespace

void reduce_into(std::byte* acc, const std::byte* src, std::size_t count, DataType t, ReduceOp op) {
  switch (t) {
    case DataType::int8: return reduce_typed<std::int8_t>(acc, src, count, op);
    case DataType::uint8: return reduce_typed<std::uint8_t>(acc, src, count, op);
    case DataType::int16: return reduce_typed<std::int16_t>(acc, src, count, op);
    case DataType::uint16: return reduce_typed<std::uint16_t>(acc, src, count, op);
    case DataType::int32: return reduce_typed<std::int32_t>(acc, src, count, op);
    case DataType::uint32: return reduce_typed<std::uint32_t>(acc, src, count, op);
    case DataType::int64: return reduce_typed<std::int64_t>(acc, src, count, op);
    case DataType::uint64: return reduce_typed<std::uint64_t>(acc, src, count, op);
    case DataType::float32: return reduce_typed<float>(acc, src, count, op);
    case DataType::float64: return reduce_typed<double>(acc, src, count, op);
  }
}

}  // namespace detail
}  // namespace hmc
