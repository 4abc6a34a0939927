#pragma once
// The command line of hmc_doctor, the same flags as `python -m hmc doctor`.
#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace hmc::doctor {

struct DoctorArgs {
  bool help = false;
  bool json = false;
  std::set<std::string> expect;              // of rdma, cuda, rocm: a missing one is a problem
  std::size_t size = std::size_t{64} << 20;  // bytes per put in the self-test
};

// Throws std::invalid_argument naming the bad flag or value (a usage error: exit status 2).
DoctorArgs parse_doctor_args(int argc, const char* const* argv);

// Bytes > 0 from "67108864", "64M", "1GiB", "512k" (binary units), as hmc.Session's buffer_size;
// nullopt for anything else, 0 and more than 2^64 - 1 included.
std::optional<std::size_t> parse_size(std::string_view text);

// Throws std::invalid_argument when the self-test's two buffers of `size` bytes would not fit in
// this host's memory (its puts would touch them all).
void check_size_fits_memory(std::size_t size);

// "usage: hmc_doctor [-h] ..." and the --help text after it.
std::string usage_line();
std::string help_text();

}  // namespace hmc::doctor
