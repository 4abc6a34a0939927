#pragma once
// Types the collectives take and return: element types and reductions for all_reduce, and Blocks,
// variable-size results in one allocation.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace hmc {

enum class ReduceOp { sum, max, min };

enum class DataType { int8, uint8, int16, uint16, int32, uint32, int64, uint64, float32, float64 };

std::size_t size_of(DataType t) noexcept;
std::string_view to_string(DataType t) noexcept;
std::string_view to_string(ReduceOp op) noexcept;

template <class T>
constexpr DataType data_type_of() {
  if constexpr (std::is_same_v<T, std::int8_t>) return DataType::int8;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return DataType::uint8;
  else if constexpr (std::is_same_v<T, std::int16_t>) return DataType::int16;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return DataType::uint16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return DataType::int32;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return DataType::uint32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return DataType::int64;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return DataType::uint64;
  else if constexpr (std::is_same_v<T, float>) return DataType::float32;
  else {
    static_assert(std::is_same_v<T, double>, "all_reduce: unsupported element type");
    return DataType::float64;
  }
}

// Block i is data[offsets[i], offsets[i + 1]); one block per rank.
struct Blocks {
  std::vector<std::byte> data;
  std::vector<std::size_t> offsets;  // count() + 1 entries

  std::size_t count() const noexcept { return offsets.empty() ? 0 : offsets.size() - 1; }
  std::span<const std::byte> operator[](std::size_t i) const {
    return {data.data() + offsets.at(i), offsets.at(i + 1) - offsets.at(i)};
  }
};

namespace detail {

// One collective as submitted (spans must stay valid until it completes).
struct CollectiveCall {
  enum class Kind {
    barrier,
    broadcast,
    all_gather,
    all_gather_v,
    gather,
    scatter,
    all_to_all,
    all_to_all_v,
    all_reduce
  };
  Kind kind = Kind::barrier;
  std::span<const std::byte> in;
  std::span<std::byte> out;
  std::vector<std::span<const std::byte>> blocks;  // scatter (root), all_to_all_v: by destination
  std::vector<std::byte> data;                     // broadcast: the root's value
  std::uint32_t root = 0;
  DataType dtype = DataType::uint8;
  ReduceOp op = ReduceOp::sum;
  std::chrono::milliseconds timeout{0};  // 0: the world's default
};

struct CollectiveResult {
  std::vector<std::byte> bytes;  // broadcast, scatter
  Blocks blocks;                 // all_gather_v, gather, all_to_all_v
};

const char* to_string(CollectiveCall::Kind k) noexcept;

}  // namespace detail
}  // namespace hmc
