#pragma once
// The doctor's report: host facts, the self-test, and every problem and note found, with the
// rules and wording of `python -m hmc doctor` (python/hmc/doctor.py), printed as text or as its JSON.
#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "host_facts.hpp"
#include "json.hpp"
#include "self_test.hpp"

namespace hmc::doctor {

struct Report {
  std::string ucx;
  std::vector<std::string> interfaces;
  std::vector<RdmaDevice> rdma;
  std::vector<std::pair<std::string, std::string>> gpu_memory;  // cuda, rocm: "available" or why not
  KeyFacts auth_key;
  std::vector<std::string> native_memory_types;  // MemoryType names as Python spells them ("CPU")
  std::optional<SelfTestResult> self_test;       // nullopt when it failed (a problem says why)
  std::vector<std::string> problems;
  std::vector<std::string> notes;
};

// expect: of rdma, cuda, rocm; size: bytes per put in the self-test.
Report diagnose(const std::set<std::string>& expect, std::size_t size);

// The same keys, in the same order, as the Python doctor's JSON.
Json to_json(const Report& report);

// The text report on stdout, its last line "doctor: ...".
void print_text(const Report& report);

}  // namespace hmc::doctor
