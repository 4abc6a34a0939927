#include "hmc/session_stats.hpp"

namespace hmc {

double OpStats::latency_quantile_us(double q) const noexcept {
  std::uint64_t total = 0;
  for (std::uint64_t n : latency_us) total += n;
  if (total == 0) return 0;
  const double want = q * static_cast<double>(total);
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += latency_us[i];
    if (static_cast<double>(seen) >= want && seen != 0) return static_cast<double>(std::uint64_t{1} << i);
  }
  return static_cast<double>(std::uint64_t{1} << (kBuckets - 1));
}

OpStats& OpStats::operator+=(const OpStats& other) noexcept {
  done += other.done;
  bytes += other.bytes;
  failed += other.failed;
  timed_out += other.timed_out;
  aborted += other.aborted;
  for (std::size_t i = 0; i < kBuckets; ++i) latency_us[i] += other.latency_us[i];
  latency_sum_us += other.latency_sum_us;
  return *this;
}

}  // namespace hmc
