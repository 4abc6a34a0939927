// hmc_doctor: what this host offers HMC, a loopback self-test of what is actually chosen and how
// fast, and a problem for every silent fallback it can see; `python -m hmc doctor` for hosts
// without Python, with the same checks, output, JSON keys and exit status.
//   hmc_doctor [--json] [--expect rdma,cuda,rocm] [--size 64M]
// Exit status: 0 no problem, 1 a problem, 2 a usage error.
#include <cstdio>
#include <exception>
#include <stdexcept>

#include "doctor_args.hpp"
#include "report.hpp"

int main(int argc, char** argv) {
  using namespace hmc::doctor;
  DoctorArgs args;
  try {
    args = parse_doctor_args(argc, argv);
    if (!args.help) check_size_fits_memory(args.size);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s\nhmc_doctor: error: %s\n", usage_line().c_str(), e.what());
    return 2;
  }
  if (args.help) {
    std::fputs(help_text().c_str(), stdout);
    return 0;
  }
  try {
    const Report report = diagnose(args.expect, args.size);
    if (args.json) std::printf("%s\n", to_json(report).dump(2).c_str());
    else print_text(report);
    return report.problems.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    // A failure outside every check (out of memory reading sysfs): still a report, never a crash.
    std::fprintf(stderr, "hmc_doctor: %s\n", e.what());
    return 1;
  }
}
