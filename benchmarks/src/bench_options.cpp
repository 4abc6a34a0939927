#include "bench_options.hpp"

#include <sstream>
#include <stdexcept>

namespace hmc::bench {
namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::size_t parse_size(const std::string& text) {
  std::size_t used = 0;
  const unsigned long long v = std::stoull(text, &used);
  const std::string unit = text.substr(used);
  if (unit.empty() || unit == "B") return v;
  if (unit == "K" || unit == "KiB") return v << 10;
  if (unit == "M" || unit == "MiB") return v << 20;
  if (unit == "G" || unit == "GiB") return v << 30;
  throw std::invalid_argument("size '" + text + "': use a number with B, K, M or G");
}

}  // namespace

std::string Options::usage() {
  return "usage: hmc_bench [--role loopback|server|client] [--host IP] [--port P]\n"
         "                 [--test put_bw,get_bw,put_lat,get_lat,batch,pipeline,idle,put_sync,tag_lat,notify_lat,kv,\n"
         "                         cold,reg,recovery]\n"
         "                 [--sizes 8,64K,1M | 8:64M] [--depth N] [--peers N] [--mode adaptive|event|poll]\n"
         "                 [--progress-thread own|shared|caller] [--tls shm|tcp|hmc-tcp|...]\n"
         "                 [--iters N] [--warmup N] [--json FILE] [--csv FILE] [--quiet]\n"
         "default tests: put_bw,get_bw,put_lat,get_lat,batch,pipeline. Latencies: p50, p99, p99.9, max (us).\n"
         "  cold      a new Session per iteration: connect + first put (cold), the connect alone (cold_conn),\n"
         "            the Session's construction (cold_new); default 20 iterations\n"
         "  reg       register_memory of a fresh, touched buffer of each size (reg) and its release (unreg),\n"
         "            with ms per GiB; no peer takes part\n"
         "  recovery  loopback only: SIGKILL a connected server, see the typed error (rec_lost), start a new\n"
         "            server, connect + put (rec_conn); recovery = kill to that put; default 5 iterations\n";
}

Options parse_options(int argc, char** argv) {
  Options o;
  o.self = argv[0];
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--role") o.role = value();
    else if (flag == "--host") o.host = value();
    else if (flag == "--port") o.port = static_cast<std::uint16_t>(std::stoul(value()));
    else if (flag == "--test") o.tests = split(value());
    else if (flag == "--sizes") {
      const std::string v = value();
      o.sizes.clear();
      if (auto colon = v.find(':'); colon != std::string::npos) {
        for (std::size_t s = parse_size(v.substr(0, colon)), end = parse_size(v.substr(colon + 1)); s <= end; s *= 2)
          o.sizes.push_back(s);
      } else {
        for (const auto& s : split(v)) o.sizes.push_back(parse_size(s));
      }
    } else if (flag == "--depth") o.depth = std::stoul(value());
    else if (flag == "--peers") o.peers = static_cast<std::uint32_t>(std::stoul(value()));
    else if (flag == "--mode") {
      const auto m = runtime::parse_progress_mode(value());
      if (!m) throw std::invalid_argument("--mode must be adaptive, event or poll");
      o.mode = *m;
    } else if (flag == "--progress-thread") {
      o.progress_thread_name = value();
      if (o.progress_thread_name == "own") {
        o.progress_thread = ProgressThread::own;
      } else if (o.progress_thread_name == "caller") {
        o.progress_thread = ProgressThread::caller;
      } else if (o.progress_thread_name == "shared") {
        o.progress_thread = ProgressThread::shared;
      } else {
        throw std::invalid_argument("--progress-thread must be own, shared or caller");
      }
    } else if (flag == "--tls") o.tls = value();
    else if (flag == "--net-devices") o.net_devices = value();
    else if (flag == "--iters") o.iters = std::stol(value());
    else if (flag == "--warmup") o.warmup = std::stol(value());
    else if (flag == "--rank") o.rank = static_cast<std::uint32_t>(std::stoul(value()));
    else if (flag == "--server-rank") o.server_rank = static_cast<std::uint32_t>(std::stoul(value()));
    else if (flag == "--json") o.json = value();
    else if (flag == "--csv") o.csv = value();
    else if (flag == "--quiet") o.quiet = true;
    else if (flag == "--help" || flag == "-h") throw std::invalid_argument("");
    else throw std::invalid_argument("unknown flag " + flag);
  }
  if (o.role != "loopback" && o.role != "server" && o.role != "client")
    throw std::invalid_argument("--role must be loopback, server or client");
  if (o.depth == 0 || o.peers == 0 || o.sizes.empty())
    throw std::invalid_argument("--depth, --peers, --sizes must be > 0");
  for (const auto& t : o.tests)
    if (t != "put_bw" && t != "get_bw" && t != "put_lat" && t != "get_lat" && t != "batch" && t != "pipeline" &&
        t != "idle" && t != "put_sync" && t != "tag_lat" && t != "notify_lat" && t != "kv" && t != "cold" &&
        t != "reg" && t != "recovery")
      throw std::invalid_argument("unknown test '" + t + "'");
  return o;
}

}  // namespace hmc::bench
