// ucx_raw_bench: raw UCX doing what HMC's operations promise, as the like-for-like baseline of
// docs/benchmarks.md (ucx_perftest's put_lat/put_bw complete locally; ours complete remotely).
//   put   put + endpoint flush per op (the bytes are at the peer when it returns)
//   get   get per op
//   notify  put + flush + 8-byte active message, the peer answers with one (put + tag round trip)
//   putbw   windows of --depth puts and one endpoint flush (each put is at the peer when its
//           window's flush completes: HMC's put promise at depth D, UCX's cheapest way to keep it)
//   getbw   windows of --depth gets, all waited for
//   scatter --blocks puts of size bytes each, read and written at blocks a shuffled block table
//           names, and one endpoint flush (a KV-cache batch; us per batch)
//   contig  the same bytes as scatter in one put + flush (the ceiling scatter is measured against)
// --segments FILE: scatter posts exactly the puts FILE lists (little-endian uint64 triples
// local_off, remote_off, nbytes: the segments a KV layout's put_blocks makes) and one flush;
// contig puts their total bytes in one put. --sizes and --blocks do not apply then.
// Two processes (fork), worker addresses and rkeys over a socketpair, busy-polling progress on
// both sides: the best case raw UCX reaches. Prints one line per (test, size): us/op p50 and
// mean (putbw/getbw: per window), MB/s and operations/s; --json FILE writes the same rows.
//   ucx_raw_bench [--tls shm|tcp|...] [--tests put,get,notify,putbw,getbw,scatter,contig] [--iters N]
//                 [--sizes 8,64,4096,...] [--depth D] [--blocks N] [--segments FILE] [--json FILE]
#include <sys/socket.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr unsigned kAmPing = 1;
constexpr unsigned kAmPong = 2;
constexpr std::size_t kMinBuffer = 16u << 20;

[[noreturn]] void die(const char* what, ucs_status_t st = UCS_OK) {
  std::fprintf(stderr, "ucx_raw_bench: %s%s%s\n", what, st == UCS_OK ? "" : ": ", st == UCS_OK ? "" : ucs_status_string(st));
  std::exit(1);
}

void send_blob(int fd, const void* p, std::uint64_t n) {
  if (::write(fd, &n, sizeof n) != sizeof n || ::write(fd, p, n) != static_cast<ssize_t>(n)) die("socketpair write");
}

std::vector<char> recv_blob(int fd) {
  std::uint64_t n = 0;
  if (::read(fd, &n, sizeof n) != sizeof n || n > (1u << 20)) die("socketpair read");
  std::vector<char> out(n);
  for (std::size_t got = 0; got < n;) {
    const ssize_t r = ::read(fd, out.data() + got, n - got);
    if (r <= 0) die("socketpair read");
    got += static_cast<std::size_t>(r);
  }
  return out;
}

struct Segment {
  std::uint64_t local_off, remote_off, nbytes;
};

// --segments FILE, checked whole before anything is mapped: a bad file is an error, not a crash.
std::vector<Segment> read_segments(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) die(("--segments: cannot open " + path).c_str());
  const std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (raw.empty() || raw.size() % 24 != 0)
    die(("--segments: " + path + " has " + std::to_string(raw.size()) +
         " bytes; want a non-empty array of 24-byte (local_off, remote_off, nbytes) uint64 triples").c_str());
  const auto u64 = [&](std::size_t at) {  // little-endian whatever the host
    std::uint64_t v = 0;
    for (int b = 7; b >= 0; --b) v = v << 8 | static_cast<unsigned char>(raw[at + static_cast<std::size_t>(b)]);
    return v;
  };
  std::vector<Segment> out(raw.size() / 24);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = {u64(24 * i), u64(24 * i + 8), u64(24 * i + 16)};
    const auto& g = out[i];
    if (g.nbytes == 0 || g.local_off + g.nbytes < g.local_off || g.remote_off + g.nbytes < g.remote_off)
      die(("--segments: segment " + std::to_string(i) + " (" + std::to_string(g.local_off) + ", " +
           std::to_string(g.remote_off) + ", " + std::to_string(g.nbytes) +
           "): nbytes must be > 0 and offset + nbytes must fit 64 bits").c_str());
  }
  return out;
}

struct Side {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_mem_h memh = nullptr;
  ucp_ep_h ep = nullptr;
  ucp_rkey_h rkey = nullptr;
  char* buffer = nullptr;  // allocated by UCX, as HMC's session buffer (shared memory on shm)
  std::size_t buffer_size = kMinBuffer;
  std::vector<std::uint64_t> src_block, dst_block;  // the block table of scatter: a shuffle each side
  std::vector<Segment> segments;                    // --segments: scatter's puts as given, instead of the table
  std::uint64_t segment_bytes = 0;                  // their sum: what contig moves in one put
  std::uint64_t remote_base = 0;
  volatile unsigned pings = 0, pongs = 0;
};

ucs_status_t on_am(void* arg, const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) {
  auto* counter = static_cast<volatile unsigned*>(arg);
  *counter = *counter + 1;
  return UCS_OK;
}

void wait(Side& s, ucs_status_ptr_t req, const char* what) {
  if (req == nullptr) return;
  if (UCS_PTR_IS_ERR(req)) die(what, UCS_PTR_STATUS(req));
  ucs_status_t st;
  while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) ucp_worker_progress(s.worker);
  ucp_request_free(req);
  if (st != UCS_OK) die(what, st);
}

void setup(Side& s, const std::string& tls, int fd) {
  ucp_config_t* config = nullptr;
  if (!tls.empty()) ::setenv("UCX_TLS", tls.c_str(), 1);
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) die("ucp_config_read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
  if (ucs_status_t st = ucp_init(&params, config, &s.context); st != UCS_OK) die("ucp_init", st);
  ucp_config_release(config);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  if (ucs_status_t st = ucp_worker_create(s.context, &wp, &s.worker); st != UCS_OK) die("ucp_worker_create", st);
  // Allocated by UCX like HMC's session buffer: its shm transports then write straight into the
  // peer's mapping, where registered user memory would need a cross-memory-attach syscall.
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mp.length = s.buffer_size;
  mp.flags = UCP_MEM_MAP_ALLOCATE;
  if (ucs_status_t st = ucp_mem_map(s.context, &mp, &s.memh); st != UCS_OK) die("ucp_mem_map", st);
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
  if (ucs_status_t st = ucp_mem_query(s.memh, &attr); st != UCS_OK) die("ucp_mem_query", st);
  s.buffer = static_cast<char*>(attr.address);
  std::memset(s.buffer, 1, s.buffer_size);
  for (auto [id, counter] : {std::pair{kAmPing, &s.pings}, std::pair{kAmPong, &s.pongs}}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.cb = on_am;
    hp.arg = const_cast<unsigned*>(counter);
    if (ucs_status_t st = ucp_worker_set_am_recv_handler(s.worker, &hp); st != UCS_OK) die("set_am_recv_handler", st);
  }
  // Exchange worker address, buffer base and rkey with the other process.
  ucp_address_t* address = nullptr;
  std::size_t address_len = 0;
  if (ucs_status_t st = ucp_worker_get_address(s.worker, &address, &address_len); st != UCS_OK) die("get_address", st);
  void* rkey_buf = nullptr;
  std::size_t rkey_len = 0;
  if (ucs_status_t st = ucp_rkey_pack(s.context, s.memh, &rkey_buf, &rkey_len); st != UCS_OK) die("rkey_pack", st);
  const auto base = reinterpret_cast<std::uint64_t>(s.buffer);
  send_blob(fd, address, address_len);
  send_blob(fd, &base, sizeof base);
  send_blob(fd, rkey_buf, rkey_len);
  ucp_rkey_buffer_release(rkey_buf);
  ucp_worker_release_address(s.worker, address);
  const auto peer_address = recv_blob(fd);
  std::memcpy(&s.remote_base, recv_blob(fd).data(), sizeof s.remote_base);
  const auto peer_rkey = recv_blob(fd);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  if (ucs_status_t st = ucp_ep_create(s.worker, &ep, &s.ep); st != UCS_OK) die("ucp_ep_create", st);
  if (ucs_status_t st = ucp_ep_rkey_unpack(s.ep, peer_rkey.data(), &s.rkey); st != UCS_OK) die("rkey_unpack", st);
}

ucs_status_ptr_t send_am(Side& s, unsigned id) {
  ucp_request_param_t p{};
  static std::uint64_t word = 0;
  return ucp_am_send_nbx(s.ep, id, nullptr, 0, &word, sizeof word, &p);
}

// The peer: progress until told to stop, answering every ping with a pong.
void serve(Side& s, int fd) {
  unsigned answered = 0;
  for (std::uint64_t spin = 0;; ++spin) {
    ucp_worker_progress(s.worker);
    while (answered < s.pings) {
      wait(s, send_am(s, kAmPong), "pong");
      ++answered;
    }
    if ((spin & 1023) == 0) {
      char c;
      if (::recv(fd, &c, 1, MSG_DONTWAIT) == 1) return;
    }
  }
}

// Waits for every request of a window (nullptr: completed at once).
void wait_all(Side& s, std::vector<ucs_status_ptr_t>& reqs, const char* what) {
  for (auto req : reqs) wait(s, req, what);
  reqs.clear();
}

// One measured operation: a put/get/notify, or a window of `depth` puts/gets.
void one(Side& s, const std::string& test, std::size_t size, std::size_t depth, std::vector<ucs_status_ptr_t>& reqs) {
  ucp_request_param_t p{};
  if (test == "put") {
    wait(s, ucp_put_nbx(s.ep, s.buffer, size, s.remote_base, s.rkey, &p), "put");
    wait(s, ucp_ep_flush_nbx(s.ep, &p), "flush");
  } else if (test == "get") {
    wait(s, ucp_get_nbx(s.ep, s.buffer, size, s.remote_base, s.rkey, &p), "get");
  } else if (test == "notify") {
    const unsigned want = s.pongs + 1;
    wait(s, ucp_put_nbx(s.ep, s.buffer, size, s.remote_base, s.rkey, &p), "put");
    wait(s, ucp_ep_flush_nbx(s.ep, &p), "flush");
    wait(s, send_am(s, kAmPing), "ping");
    while (s.pongs < want) ucp_worker_progress(s.worker);
  } else if (test == "putbw") {
    for (std::size_t i = 0; i < depth; ++i)
      reqs.push_back(ucp_put_nbx(s.ep, s.buffer, size, s.remote_base, s.rkey, &p));
    reqs.push_back(ucp_ep_flush_nbx(s.ep, &p));
    wait_all(s, reqs, "put window");
  } else if (test == "scatter" && !s.segments.empty()) {
    for (const auto& g : s.segments)
      reqs.push_back(ucp_put_nbx(s.ep, s.buffer + g.local_off, g.nbytes, s.remote_base + g.remote_off, s.rkey, &p));
    reqs.push_back(ucp_ep_flush_nbx(s.ep, &p));
    wait_all(s, reqs, "scatter");
  } else if (test == "scatter") {
    for (std::size_t i = 0; i < s.src_block.size(); ++i)
      reqs.push_back(ucp_put_nbx(s.ep, s.buffer + s.src_block[i] * size, size, s.remote_base + s.dst_block[i] * size,
                                 s.rkey, &p));
    reqs.push_back(ucp_ep_flush_nbx(s.ep, &p));
    wait_all(s, reqs, "scatter");
  } else if (test == "contig") {
    wait(s, ucp_put_nbx(s.ep, s.buffer, s.segments.empty() ? size * s.src_block.size() : s.segment_bytes,
                        s.remote_base, s.rkey, &p), "put");
    wait(s, ucp_ep_flush_nbx(s.ep, &p), "flush");
  } else {  // getbw
    for (std::size_t i = 0; i < depth; ++i)
      reqs.push_back(ucp_get_nbx(s.ep, s.buffer, size, s.remote_base, s.rkey, &p));
    wait_all(s, reqs, "get window");
  }
}

struct Row {
  std::string test;
  std::size_t size = 0, depth = 1;
  long ops = 0;
  double p50_us = 0, mean_us = 0, seconds = 0;
  double bytes = 0;  // moved in the measured phase (--segments: sizes differ, so not size * ops)
};

// `ops` operations (windowed tests: ops / depth windows; scatter/contig: ops batches), after a tenth
// as many unmeasured.
Row run(Side& s, const std::string& test, std::size_t size, long ops, std::size_t depth) {
  const bool window = test == "putbw" || test == "getbw";
  const bool kv = test == "scatter" || test == "contig";
  const std::size_t d = window ? depth : kv ? (s.segments.empty() ? s.src_block.size() : s.segments.size()) : 1;
  const long rounds = kv ? ops : std::max<long>(ops / static_cast<long>(d), 1);  // kv: ops counts batches
  std::vector<ucs_status_ptr_t> reqs;
  reqs.reserve(d + 1);
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(rounds));
  for (long i = -std::max<long>(rounds / 10, 2); i < 0; ++i) one(s, test, size, d, reqs);
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < rounds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    one(s, test, size, d, reqs);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  Row r{test, size, d, rounds * static_cast<long>(d), 0, 0,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
        kv && !s.segments.empty() ? static_cast<double>(s.segment_bytes) * static_cast<double>(rounds)
                                  : static_cast<double>(size) * static_cast<double>(rounds * static_cast<long>(d))};
  double sum = 0;
  for (double v : us) sum += v;
  r.mean_us = sum / static_cast<double>(us.size());
  std::nth_element(us.begin(), us.begin() + static_cast<long>(us.size() / 2), us.end());
  r.p50_us = us[us.size() / 2];
  return r;
}

void write_json(const std::string& path, const std::string& tls, const std::vector<Row>& rows) {
  std::ofstream f(path);
  f << "{\"meta\": {\"impl\": \"ucx-raw\", \"tls\": \"" << tls << "\"},\n \"results\": [\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const double bytes = r.bytes;
    f << "  {\"test\": \"" << r.test << "\", \"size\": " << r.size << ", \"depth\": " << r.depth
      << ", \"iters\": " << r.ops << ", \"seconds\": " << r.seconds << ", \"lat_p50_us\": " << r.p50_us
      << ", \"lat_mean_us\": " << r.mean_us << ", \"bw_mbps\": " << bytes / r.seconds / 1e6
      << ", \"msg_rate\": " << static_cast<double>(r.ops) / r.seconds
      // from the median operation (window): what the machine does when this process is not preempted
      << ", \"bw_p50_mbps\": " << bytes / static_cast<double>(r.ops) * static_cast<double>(r.depth) / r.p50_us
      << ", \"msg_rate_p50\": " << static_cast<double>(r.depth) / r.p50_us * 1e6 << "}"
      << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  f << " ]}\n";
}

// Everything but the worker and context, released in UCX's order (leak checkers see the rest).
void teardown(Side& s) {
  ucp_rkey_destroy(s.rkey);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = 0;  // a flushed close
  wait(s, ucp_ep_close_nbx(s.ep, &p), "ep close");
  ucp_mem_unmap(s.context, s.memh);
}

}  // namespace

int main(int argc, char** argv) {
  std::string tls = "shm", json;
  int iters = 20000;
  bool iters_given = false;  // --iters N: N at every size; default: a twentieth from 1 MiB up
  std::size_t depth = 16;
  std::size_t blocks = 15000;
  std::string segments_file;
  std::vector<std::string> tests{"put", "get", "notify", "putbw"};
  std::vector<std::size_t> sizes{8, 64, 4096, 65536, 1u << 20};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tls" && i + 1 < argc) {
      tls = argv[++i];
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::max(10, std::atoi(argv[++i]));
      iters_given = true;
    } else if (a == "--depth" && i + 1 < argc) {
      depth = static_cast<std::size_t>(std::clamp(std::atoi(argv[++i]), 1, 1024));
    } else if (a == "--blocks" && i + 1 < argc) {
      blocks = static_cast<std::size_t>(std::clamp(std::atoi(argv[++i]), 1, 1 << 22));
    } else if (a == "--segments" && i + 1 < argc) {
      segments_file = argv[++i];
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--tests" && i + 1 < argc) {
      tests.clear();
      for (std::string rest = argv[++i]; !rest.empty();) {
        const auto comma = rest.find(',');
        tests.push_back(rest.substr(0, comma));
        rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
        static const char* const known[] = {"put", "get", "notify", "putbw", "getbw", "scatter", "contig"};
        if (std::none_of(std::begin(known), std::end(known), [&](const char* k) { return tests.back() == k; }))
          die("--tests: put, get, notify, putbw, getbw, scatter, contig");
      }
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(p, &end, 10);
        if (end == p || v == 0 || v > (1ull << 30)) die("--sizes: comma-separated byte counts, 1 .. 1 GiB");
        sizes.push_back(v);
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr,
                   "usage: ucx_raw_bench [--tls shm|tcp|...] [--tests put,get,notify,putbw,getbw,scatter,contig]\n"
                   "                     [--iters N] [--sizes 8,64,...] [--depth D] [--blocks N] [--segments FILE]\n"
                   "                     [--json FILE]\n"
                   "  --segments FILE: scatter puts FILE's little-endian uint64 (local_off, remote_off, nbytes)\n"
                   "  triples and one flush, contig their total in one put (--sizes and --blocks do not apply)\n");
      return 2;
    }
  }
  Side s;
  const bool kv = std::any_of(tests.begin(), tests.end(), [](const std::string& t) { return t == "scatter" || t == "contig"; });
  if (!segments_file.empty()) {
    // Read before the fork: both sides then map a buffer covering every segment and contig's total.
    s.segments = read_segments(segments_file);
    for (const auto& g : s.segments) {
      if (s.segment_bytes + g.nbytes < s.segment_bytes) die("--segments: the total bytes overflow 64 bits");
      s.segment_bytes += g.nbytes;
      s.buffer_size = std::max<std::uint64_t>({s.buffer_size, g.local_off + g.nbytes, g.remote_off + g.nbytes});
    }
    s.buffer_size = std::max<std::uint64_t>(s.buffer_size, s.segment_bytes);
    sizes = {static_cast<std::size_t>(s.segment_bytes / s.segments.size())};  // one point per test; the bytes column
  }
  if (s.segments.empty())
    for (std::size_t size : sizes) s.buffer_size = std::max(s.buffer_size, kv ? size * blocks : size);
  // Shuffled block tables on both sides, the same in every run (fixed seed): a KV cache's pages.
  if (kv && s.segments.empty()) {
    s.src_block.resize(blocks);
    for (std::size_t i = 0; i < blocks; ++i) s.src_block[i] = i;
    s.dst_block = s.src_block;
    std::mt19937_64 rng(42);
    std::shuffle(s.src_block.begin(), s.src_block.end(), rng);
    std::shuffle(s.dst_block.begin(), s.dst_block.end(), rng);
  }
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) die("socketpair");
  const pid_t child = ::fork();
  if (child < 0) die("fork");
  if (child == 0) {
    ::close(fds[0]);
    setup(s, tls, fds[1]);
    serve(s, fds[1]);
    std::_Exit(0);  // the parent measured; UCX teardown races the parent's own
  }
  ::close(fds[1]);
  setup(s, tls, fds[0]);
  std::printf("# raw UCX, tls=%s, %d operations per point, depth %zu (putbw/getbw),\n"
              "# two processes, busy polling; us per operation (putbw/getbw: per window of depth operations;\n"
              "# scatter/contig: per batch, ops = blocks)\n",
              tls.c_str(), iters, depth);
  std::printf("%-7s %9s %6s %9s %9s %12s %12s\n", "test", "bytes", "depth", "p50", "mean", "MB/s", "ops/s");
  std::vector<Row> rows;
  std::vector<ucs_status_ptr_t> reqs;
  for (int i = 0; i < 100; ++i) one(s, "notify", 8, 1, reqs);  // endpoint wireup and first touches, unmeasured
  for (const auto& test : tests) {
    for (std::size_t size : sizes) {
      const bool batch = test == "scatter" || test == "contig";
      const long n = batch ? (iters_given ? iters : 20)
                           : size >= (1u << 20) && !iters_given ? std::max(10, iters / 20) : iters;
      const Row r = run(s, test, size, n, depth);
      std::printf("%-7s %9zu %6zu %9.2f %9.2f %12.1f %12.0f\n", r.test.c_str(), r.size, r.depth, r.p50_us, r.mean_us,
                  r.bytes / r.seconds / 1e6,
                  static_cast<double>(r.ops) / r.seconds);
      std::fflush(stdout);
      rows.push_back(r);
    }
  }
  if (!json.empty()) write_json(json, tls, rows);
  teardown(s);  // while the peer still progresses: a flushed close needs it
  const char quit = 'q';
  if (::write(fds[0], &quit, 1) != 1) die("socketpair write");
  int status = 0;
  ::waitpid(child, &status, 0);
  ucp_worker_destroy(s.worker);
  ucp_cleanup(s.context);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
