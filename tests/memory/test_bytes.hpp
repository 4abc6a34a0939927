#pragma once
// Byte patterns and a comparison that reports the first difference instead of printing megabytes.
#include <cstddef>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace hmc::test {

inline std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return v;
}

inline ::testing::AssertionResult same_bytes(const std::vector<std::byte>& actual,
                                             const std::vector<std::byte>& expected) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << ", expected " << expected.size();
  for (std::size_t i = 0; i < actual.size(); ++i)
    if (actual[i] != expected[i])
      return ::testing::AssertionFailure()
             << "first difference at byte " << i << ": " << std::to_integer<int>(actual[i]) << ", expected "
             << std::to_integer<int>(expected[i]);
  return ::testing::AssertionSuccess();
}

}  // namespace hmc::test
