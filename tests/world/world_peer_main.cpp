// One rank of a world in its own process, for the multi-process tests.
//   hmc_world_peer url=URL size=N [rank=R] [tls=shm|tcp] [scenario=collectives|barriers|join]
//                  [job=ID] [buffer=BYTES] [timeout_ms=MS] [uds=DIR] [devices=lo] [local_ip=IP]
// Prints "RANK r" once joined, then per scenario "OK name" / "FAIL name: why" lines and "DONE";
// any HMC error ends it with "ERROR <status> <message>" and exit status 3.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <string>

#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "hmc/world/world.hpp"

namespace {

using namespace std::chrono_literals;
using hmc::Blocks;
using hmc::World;

std::map<std::string, std::string> args;

std::string arg(const std::string& k, const std::string& fallback = "") {
  auto it = args.find(k);
  return it == args.end() ? fallback : it->second;
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Bytes that differ for every (source, destination, index): misplaced bytes never match.
std::vector<std::byte> data(std::uint32_t src, std::uint32_t dst, std::size_t n) {
  std::vector<std::byte> v(n);
  std::uint64_t x = (src + 1) * 0x9E3779B97F4A7C15ull ^ (dst + 7) * 0xC2B2AE3D27D4EB4Full ^ n;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v[i] = static_cast<std::byte>(x >> 56);
  }
  return v;
}

int failures = 0;
void check(bool ok, const std::string& name, const std::string& why = "content differs") {
  if (ok) {
    say("OK " + name);
  } else {
    ++failures;
    say("FAIL " + name + ": " + why);
  }
}

bool same(std::span<const std::byte> a, const std::vector<std::byte>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

void collectives(World& w) {
  const std::uint32_t n = w.size(), r = w.rank();
  w.barrier();
  w.barrier(5s);
  check(true, "barrier");

  for (std::size_t size : {std::size_t{0}, std::size_t{5}, std::size_t{777777}}) {
    const std::uint32_t root = static_cast<std::uint32_t>(size % n);
    auto got = w.broadcast(r == root ? data(root, 0, size) : std::vector<std::byte>{}, root);
    check(got == data(root, 0, size), "broadcast " + std::to_string(size));
  }

  for (std::size_t size : {std::size_t{3}, std::size_t{100003}}) {
    const auto mine = data(r, 0, size);
    std::vector<std::byte> out(size * n);
    w.all_gather(mine, out);
    bool ok = true;
    for (std::uint32_t p = 0; p < n; ++p) ok = ok && same(std::span(out).subspan(p * size, size), data(p, 0, size));
    check(ok, "all_gather " + std::to_string(size));
  }

  {
    auto size_of = [](std::uint32_t p) { return p == 1 ? std::size_t{0} : std::size_t{p} * 9973 + 1; };
    const Blocks b = w.all_gather_v(data(r, 1, size_of(r)));
    bool ok = b.count() == n;
    for (std::uint32_t p = 0; ok && p < n; ++p) ok = same(b[p], data(p, 1, size_of(p)));
    check(ok, "all_gather_v");
  }

  {
    const std::uint32_t root = 2 % n;
    auto size_of = [](std::uint32_t p) { return std::size_t{p} * 79193 + 5; };
    const Blocks b = w.gather(data(r, 2, size_of(r)), root);
    bool ok = r == root ? b.count() == n : b.count() == 0;
    for (std::uint32_t p = 0; ok && r == root && p < n; ++p) ok = same(b[p], data(p, 2, size_of(p)));
    check(ok, "gather");
  }

  {
    const std::uint32_t root = n - 1;
    auto size_of = [](std::uint32_t d) { return std::size_t{d} * 50021 + 3; };
    std::vector<std::vector<std::byte>> mine;
    std::vector<std::span<const std::byte>> blocks;
    if (r == root) {
      for (std::uint32_t d = 0; d < n; ++d) mine.push_back(data(root, d, size_of(d)));
      for (auto& m : mine) blocks.emplace_back(m);
    }
    check(w.scatter(blocks, root) == data(root, r, size_of(r)), "scatter");
  }

  for (std::size_t block : {std::size_t{4099}, std::size_t{70001}}) {
    std::vector<std::byte> in, out(block * n);
    for (std::uint32_t d = 0; d < n; ++d) {
      auto part = data(r, d, block);
      in.insert(in.end(), part.begin(), part.end());
    }
    w.all_to_all(in, out);
    bool ok = true;
    for (std::uint32_t s = 0; s < n; ++s) ok = ok && same(std::span(out).subspan(s * block, block), data(s, r, block));
    check(ok, "all_to_all " + std::to_string(block));
  }

  {
    auto size_of = [](std::uint32_t s, std::uint32_t d) {
      return (s + d) % 5 == 0 ? std::size_t{0} : (std::size_t{s} + 1) * (d + 3) * 977 % 190001;
    };
    std::vector<std::vector<std::byte>> mine;
    std::vector<std::span<const std::byte>> blocks;
    for (std::uint32_t d = 0; d < n; ++d) mine.push_back(data(r, d + 100, size_of(r, d)));
    for (auto& m : mine) blocks.emplace_back(m);
    const Blocks b = w.all_to_all_v(blocks);
    bool ok = b.count() == n;
    for (std::uint32_t s = 0; ok && s < n; ++s) ok = same(b[s], data(s, r + 100, size_of(s, r)));
    check(ok, "all_to_all_v");
  }

  for (std::size_t count : {std::size_t{1001}, std::size_t{300001}}) {
    std::vector<std::int64_t> v(count), out(count);
    for (std::size_t i = 0; i < count; ++i)
      v[i] = static_cast<std::int64_t>(i * (r + 1)) - static_cast<std::int64_t>(r);
    w.all_reduce<std::int64_t>(v, out, hmc::ReduceOp::sum);
    bool ok = true;
    const std::int64_t ranks = n, rank_sum = std::int64_t{n} * (n - 1) / 2;
    for (std::size_t i = 0; ok && i < count; ++i)
      ok = out[i] == static_cast<std::int64_t>(i) * (rank_sum + ranks) - rank_sum;
    check(ok, "all_reduce sum int64 " + std::to_string(count));

    std::vector<double> f(count);
    for (std::size_t i = 0; i < count; ++i) f[i] = static_cast<double>((i + r * 37) % n) - 0.5 * r;
    std::vector<double> expect_max(count), expect_min(count);
    for (std::size_t i = 0; i < count; ++i) {
      double mx = -1e300, mn = 1e300;
      for (std::uint32_t p = 0; p < n; ++p) {
        const double x = static_cast<double>((i + p * 37) % n) - 0.5 * p;
        mx = std::max(mx, x);
        mn = std::min(mn, x);
      }
      expect_max[i] = mx;
      expect_min[i] = mn;
    }
    std::vector<double> g = f;
    w.all_reduce<double>(g, g, hmc::ReduceOp::max);  // in place
    check(g == expect_max, "all_reduce max float64 in place " + std::to_string(count));
    std::vector<double> h(count);
    w.all_reduce<double>(f, h, hmc::ReduceOp::min);
    check(h == expect_min, "all_reduce min float64 " + std::to_string(count));
  }

  // One-sided puts by rank after connect(): half the pairs dial, the other half ring a doorbell.
  {
    const std::uint32_t next = (r + 1) % n, prev = (r + n - 1) % n;
    constexpr std::size_t kBytes = 4096;
    if (n > 1) w.connect(next);
    w.session().buffer().write_from_cpu(data(r, 77, kBytes).data(), kBytes, 0);
    if (n > 1) w.session().put(next, 0, kBytes, kBytes);
    w.barrier();  // every put is complete (and visible) before anyone reads
    std::vector<std::byte> got(kBytes);
    w.session().buffer().read_to_cpu(got.data(), kBytes, n > 1 ? kBytes : 0);
    check(got == data(n > 1 ? prev : r, 77, kBytes), "put by rank after connect");
    w.barrier();
  }

  // The awaitable forms, from a coroutine on the session's loop.
  {
    auto task = [&]() -> hmc::runtime::asio::awaitable<bool> {
      namespace asio = hmc::runtime::asio;
      co_await w.async_barrier(0ms, asio::use_awaitable);
      const auto mine = data(r, 9, 1234 + r);
      Blocks b = co_await w.async_all_gather_v(mine, 0ms, asio::use_awaitable);
      bool ok = b.count() == n;
      for (std::uint32_t p = 0; ok && p < n; ++p) ok = same(b[p], data(p, 9, 1234 + p));
      // A named argument: GCC 12 destroys a ternary's temporaries inside co_await twice.
      std::vector<std::byte> value;
      if (r == 0) value = data(0, 9, 99);
      auto bytes = co_await w.async_broadcast(std::move(value), 0, 0ms, asio::use_awaitable);
      co_return ok&& bytes == data(0, 9, 99);
    };
    auto f = hmc::runtime::asio::co_spawn(w.session().executor(), task(), hmc::runtime::asio::use_future);
    // Through the loop's one wait: it drives the loop when the session lets callers drive.
    w.session().event_loop().wait(f, hmc::runtime::deadline_after(std::chrono::seconds(60)));
    check(f.get(), "awaitable collectives");
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* eq = std::strchr(argv[i], '=');
    if (eq != nullptr) args[std::string(argv[i], static_cast<std::size_t>(eq - argv[i]))] = eq + 1;
  }
  try {
    hmc::WorldOptions o;
    o.session.buffer_size = std::stoull(arg("buffer", std::to_string(1u << 20)));
    o.session.ucx_tls = arg("tls", "shm");
    o.session.ucx_net_devices = arg("devices", "lo");
    if (const std::string t = arg("thread", "own"); t != "own")
      o.session.progress_thread = t == "caller" ? hmc::ProgressThread::caller : hmc::ProgressThread::shared;
    o.session.timeout = std::chrono::milliseconds(std::stoll(arg("timeout_ms", "20000")));
    if (!arg("uds").empty()) o.session.ctrl.uds_dir = arg("uds");
    o.timeout = o.session.timeout;
    o.store.timeout = o.session.timeout;
    o.store.job_id = arg("job");
    o.local_ip = arg("local_ip");
    if (!arg("start_store").empty()) o.start_store = arg("start_store") == "1";
    std::optional<std::uint32_t> rank;
    if (!arg("rank").empty()) rank = static_cast<std::uint32_t>(std::stoul(arg("rank")));
    World w(arg("url"), static_cast<std::uint32_t>(std::stoul(arg("size", "0"))), rank, o);
    say("RANK " + std::to_string(w.rank()));
    const std::string scenario = arg("scenario", "collectives");
    if (scenario == "collectives") {
      collectives(w);
    } else if (scenario == "mismatch") {  // rank 1 contributes one byte more than the others
      std::vector<std::byte> in(10 + (w.rank() == 1 ? 1 : 0)), out(in.size() * w.size());
      w.all_gather(in, out);
    } else if (scenario == "barriers") {
      for (;;) w.barrier();
    } else {
      w.barrier();
    }
    w.barrier();  // nobody leaves (and takes the store with it) before everyone is done
    say("DONE");
    return failures == 0 ? 0 : 1;
  } catch (const hmc::Error& e) {
    say("ERROR " + std::string(hmc::to_string(e.status())) + " " + e.what());
    return 3;
  } catch (const std::exception& e) {
    say("ERROR exception " + std::string(e.what()));
    return 4;
  }
}
