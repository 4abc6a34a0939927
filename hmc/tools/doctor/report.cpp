#include "report.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <new>
#include <string_view>

#include "hmc/error.hpp"
#include "hmc/memory.hpp"

namespace hmc::doctor {

namespace {

struct GpuKind {
  const char* name;  // as --expect spells it
  MemoryType memory;
};
constexpr GpuKind kGpus[] = {{"cuda", MemoryType::NVIDIA_GPU}, {"rocm", MemoryType::AMD_GPU}};

std::string upper(std::string_view text) {
  std::string out;
  for (const char c : text) out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// The name Python's hmc package gives the exception a session threw (hmc._errors).
std::string error_name(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  if (error == nullptr) return dynamic_cast<const std::bad_alloc*>(&e) != nullptr ? "MemoryError" : "HMCError";
  return error->status() == Status::ERROR ? "HMCError" : std::string(hmc::error_name(error->status()));
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t at; (at = text.find(sep, start)) != std::string_view::npos; start = at + 1)
    parts.emplace_back(text.substr(start, at - start));
  parts.emplace_back(text.substr(start));
  return parts;
}

Json::Array strings(const std::vector<std::string>& items) { return Json::Array(items.begin(), items.end()); }

Json::Object pairs(const std::vector<std::pair<std::string, std::string>>& items) {
  Json::Object out;
  for (const auto& [key, value] : items) out.emplace_back(key, value);
  return out;
}

Json rdma_json(const std::vector<RdmaDevice>& devices) {
  Json::Object out;
  for (const auto& device : devices) {
    Json::Array ports;
    for (const auto& [port, state] : device.ports) ports.emplace_back("port " + std::to_string(port) + ": " + state);
    out.emplace_back(device.name, std::move(ports));
  }
  return out;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

Report diagnose(const std::set<std::string>& expect, std::size_t size) {
  Report r;
  r.ucx = ucx_version();
  r.interfaces = interface_names();
  if (std::all_of(r.interfaces.begin(), r.interfaces.end(), [](const std::string& n) { return n == "lo"; }))
    r.notes.push_back("only a loopback interface: peers on other hosts cannot reach this one");

  r.rdma = rdma_devices();
  const bool active = std::any_of(r.rdma.begin(), r.rdma.end(), [](const RdmaDevice& d) {
    return std::any_of(d.ports.begin(), d.ports.end(),
                       [](const auto& port) { return port.second.find("ACTIVE") != std::string::npos; });
  });
  if (expect.contains("rdma") && !active) {
    // Appended, not "literal" + string: GCC 12 -Warray-bounds misfires on the latter (GCC PR 105329).
    std::string problem = "RDMA expected but no active RDMA port (";
    problem += r.rdma.empty() ? "no device in " : "devices without an ACTIVE port";
    if (r.rdma.empty()) problem += kRdmaSysfs;
    problem += "): ConnType.RDMA is UnsupportedError here and UCX falls back to tcp or shm";
    r.problems.push_back(std::move(problem));
  }

  for (const auto& gpu : kGpus) {
    std::string why;
    const bool ok = Memory::available(gpu.memory, 0, &why);
    r.gpu_memory.emplace_back(gpu.name, ok ? "available" : why);
    if (expect.contains(gpu.name) && !ok) r.problems.push_back(upper(gpu.name) + " expected but not usable: " + why);
  }

  r.auth_key = auth_key();
  if (!r.auth_key.problem.empty()) r.problems.push_back(r.auth_key.problem);

  try {
    r.self_test = run_self_test(size);
  } catch (const std::exception& e) {
    r.problems.push_back("loopback self-test failed: " + error_name(e) + ": " + e.what());
  }
  if (r.self_test) {
    const auto& transports = r.self_test->transports;
    const auto names = split(transports, ',');
    if (std::find(names.begin(), names.end(), "tcp") != names.end() && transports.find("posix") == std::string::npos) {
      r.problems.push_back("same-host peers use " + transports +
                           ": shared memory is unusable here (separate namespaces or UCX_TLS without shm), so local "
                           "transfers go through TCP");
    }
  }

  // Python lets this error escape; here it is one more problem, and the staging check has no answer.
  std::vector<MemoryType> native;
  try {
    native = native_memory_types();
  } catch (const std::exception& e) {
    r.problems.push_back("a session cannot be created: " + error_name(e) + ": " + e.what());
  }
  for (const MemoryType t : native) r.native_memory_types.push_back(upper(to_string(t)));
  for (std::size_t i = 0; i < std::size(kGpus); ++i) {
    const bool moved = std::find(native.begin(), native.end(), kGpus[i].memory) != native.end();
    if (r.gpu_memory[i].second == "available" && !moved && !r.native_memory_types.empty()) {
      const std::string name = upper(kGpus[i].name);
      r.problems.push_back(name + " memory is staged through host buffers: this UCX was built without " + name +
                           " support, so GPU transfers cost a copy each way");
    }
  }
  return r;
}

Json to_json(const Report& r) {
  Json self_test;
  if (r.self_test) {
    const auto& t = *r.self_test;
    self_test = Json::Object{{"transports", t.transports},
                             {"connect_ms", t.connect_ms},
                             {"put_64B_p50_us", t.put_64B_p50_us},
                             {"put_bandwidth_GBps", t.put_bandwidth_GBps},
                             {"put_bytes", t.put_bytes}};
  }
  Json::Object gpus = pairs(r.gpu_memory);
  return Json::Object{
      {"hmc", Json::Object{{"native_memory_types", strings(r.native_memory_types)}}},
      {"host", Json::Object{{"ucx", r.ucx},
                            {"interfaces", strings(r.interfaces)},
                            {"rdma", rdma_json(r.rdma)},
                            {"gpu_memory", std::move(gpus)},
                            {"auth_key", pairs(r.auth_key.info)}}},
      {"self_test", std::move(self_test)},
      {"problems", strings(r.problems)},
      {"notes", strings(r.notes)},
  };
}

void print_text(const Report& r) {
  std::vector<std::string> gpus, key;
  for (const auto& [name, state] : r.gpu_memory) gpus.push_back(name + ": " + state);
  for (const auto& [name, value] : r.auth_key.info) key.push_back(name + " " + value);
  std::printf("UCX           %s\n", r.ucx.c_str());
  std::printf("interfaces    %s\n", joined(r.interfaces).c_str());
  std::string rdma = "none (";
  rdma += kRdmaSysfs;
  rdma += " is empty or absent)";
  std::printf("RDMA          %s\n", r.rdma.empty() ? rdma.c_str() : rdma_json(r.rdma).dump().c_str());
  std::printf("GPU memory    %s\n", joined(gpus).c_str());
  std::printf("auth key      %s\n", joined(key).c_str());
  std::printf("UCX moves     %s memory itself\n", joined(r.native_memory_types).c_str());
  if (r.self_test) {
    const auto& t = *r.self_test;
    std::printf("self-test     %s: connect %s ms, 64 B put p50 %s us, %llu MiB puts at %s GB/s\n", t.transports.c_str(),
                Json::float_text(t.connect_ms).c_str(), Json::float_text(t.put_64B_p50_us).c_str(),
                static_cast<unsigned long long>(t.put_bytes >> 20), Json::float_text(t.put_bandwidth_GBps).c_str());
  }
  for (const auto& n : r.notes) std::printf("note          %s\n", n.c_str());
  for (const auto& p : r.problems) std::printf("PROBLEM       %s\n", p.c_str());
  if (r.problems.empty()) std::printf("doctor: no problems found\n");
  else std::printf("doctor: %zu problem(s)\n", r.problems.size());
}

}  // namespace hmc::doctor
