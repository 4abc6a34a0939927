#include "hmc/world/world.hpp"

#include <netdb.h>

#include <cstdlib>
#include <future>
#include <thread>

#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/log.hpp"
#include "hmc/store/store_server.hpp"
#include "security/auth.hpp"
#include "store/store_handshake.hpp"
#include "world/world_impl.hpp"

namespace hmc {

namespace {

using std::chrono::milliseconds;

std::optional<std::uint32_t> env_number(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const unsigned long n = std::strtoul(v, &end, 10);
  if (*end != '\0' || n > UINT32_MAX) throw InvalidConfigError(std::string(name) + "='" + v + "' is not a number");
  return static_cast<std::uint32_t>(n);
}

// The numeric address of a host name (the embedded store binds it).
std::string numeric_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr)
    throw InvalidConfigError("store host '" + host + "' does not resolve");
  char text[NI_MAXHOST];
  const int rc = ::getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
  ::freeaddrinfo(found);
  if (rc != 0) throw InvalidConfigError("store host '" + host + "' has no numeric address");
  return text;
}

std::string hex_nonce() {
  const auto n = detail::random_nonce();
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < 8; ++i) {
    out += digits[std::to_integer<unsigned>(n[i]) >> 4];
    out += digits[std::to_integer<unsigned>(n[i]) & 15];
  }
  return out;
}

}  // namespace

World::World(const std::string& store_url, std::uint32_t size, std::optional<std::uint32_t> rank,
             WorldOptions options) {
  const StoreAddress where = parse_store_url(store_url);  // a bad URL fails before anything starts
  const bool env = store_url.rfind("env://", 0) == 0;
  if (env) {
    if (size == 0) size = env_number("WORLD_SIZE").value_or(0);
    if (!rank) rank = env_number("RANK");
    if (auto local = env_number("LOCAL_RANK"); local && options.session.mem_type != MemoryType::CPU)
      options.session.device_id = static_cast<int>(*local);
  }
  if (size == 0) throw InvalidArgumentError("world size must be > 0 (for env:// set WORLD_SIZE)");
  if (rank && *rank >= size)
    throw InvalidArgumentError("rank " + std::to_string(*rank) + " is outside a world of " + std::to_string(size));
  if (options.start_store.value_or(false) && where.scheme != "tcp")
    throw InvalidConfigError("start_store: " + store_url + " is not an embedded store (tcp:// or env://)");
  if (options.session.mem_type != MemoryType::CPU && options.session.mem_type != MemoryType::DEFAULT)
    throw UnsupportedError("collectives need a CPU session buffer (SessionOptions::mem_type = CPU)");

  detail::take_session_auth(options.store, options.session);
  session_ = std::make_unique<Session>(options.session);
  auto& loop = session_->event_loop();
  // The embedded store: hosted by rank 0, or (automatic ranks) by whichever process binds it first.
  if (where.scheme == "tcp") {
    const bool explicit_host = options.start_store.has_value();
    const bool host = explicit_host ? *options.start_store : (!rank || *rank == 0);
    if (host) {
      StoreServerOptions so;
      so.auth_key = options.store.auth_key;
      so.authenticate = options.store.authenticate;
      so.tls = options.store.tls;
      so.max_connections = std::max<std::size_t>(so.max_connections, 2 * std::size_t{size} + 16);
      auto server = std::make_unique<StoreServer>(loop, so);
      try {
        server->listen(numeric_address(where.endpoints[0].first), where.endpoints[0].second);
        store_server_ = std::move(server);
      } catch (const InvalidConfigError&) {
        if (explicit_host || rank) throw;  // asked to host, or rank 0: the port must be ours
      }
    }
  }
  store_ = std::make_unique<Store>(store_url, options.store, loop);
  Store& st = *store_;
  // Every rank must agree on the size; the first to get here sets it.
  const std::string agreed = st.compare_set("world/size", "", std::to_string(size));
  if (agreed != std::to_string(size))
    throw InvalidConfigError("world size " + std::to_string(size) + " differs from the size " + agreed +
                             " other ranks of job '" + st.job_id() + "' use");
  if (!rank) {
    const std::int64_t n = st.add("world/rank_counter", 1) - 1;
    if (n < 0 || n >= static_cast<std::int64_t>(size))
      throw InvalidConfigError("more than " + std::to_string(size) + " ranks joined job '" + st.job_id() + "'");
    rank = static_cast<std::uint32_t>(n);
  } else {
    const std::string me = hex_nonce();
    if (st.compare_set(detail::rank_key(*rank, "owner"), "", me) != me)
      throw InvalidConfigError("rank " + std::to_string(*rank) + " of job '" + st.job_id() + "' has joined already");
  }
  if (options.local_ip.empty()) options.local_ip = st.local_address();
  start_session(*rank, size, options);
  const PeerAddress me = address();
  st.set(detail::rank_key(*rank, "addr"), me.ip + " " + std::to_string(me.ctrl_port));
  // Everyone joined: the last to arrive opens the door (O(1) store requests per rank).
  const std::int64_t arrived = st.add("world/joined", 1);
  if (arrived == static_cast<std::int64_t>(size)) st.set("world/ready", "1");
  try {
    st.wait({"world/ready"}, options.store.timeout);
  } catch (const TimeoutError&) {
    const auto joined = st.add("world/joined", 0);
    throw TimeoutError("only " + std::to_string(joined) + " of " + std::to_string(size) + " ranks joined job '" +
                       st.job_id() + "' at " + store_url + " within " + std::to_string(options.store.timeout.count()) +
                       " ms");
  }
  impl_->start();
  if (options.full_mesh) connect_all();
}

World::World(std::uint32_t rank, std::uint32_t size, WorldOptions options) {
  if (size == 0 || rank >= size)
    throw InvalidArgumentError("rank " + std::to_string(rank) + " of a world of " + std::to_string(size));
  if (options.session.mem_type != MemoryType::CPU && options.session.mem_type != MemoryType::DEFAULT)
    throw UnsupportedError("collectives need a CPU session buffer (SessionOptions::mem_type = CPU)");
  session_ = std::make_unique<Session>(options.session);
  if (options.local_ip.empty()) options.local_ip = options.session.local_ip;
  start_session(rank, size, options);
}

void World::start_session(std::uint32_t rank, std::uint32_t size, const WorldOptions& options) {
  session_->init_server(options.local_ip, 0, 0, 0, rank);
  impl_ = std::make_shared<detail::WorldImpl>(*session_, store_.get(), rank, size, options);
}

World::~World() { close(); }

std::uint32_t World::rank() const noexcept { return impl_->rank; }
std::uint32_t World::size() const noexcept { return impl_->size; }
Session& World::session() noexcept { return *session_; }
Store* World::store() noexcept { return store_.get(); }

PeerAddress World::address() const { return PeerAddress{impl_->options.local_ip, session_->ctrl_port()}; }

void World::join(std::vector<PeerAddress> directory) {
  if (store_) throw InvalidArgumentError("join: this world bootstraps through its store");
  if (directory.size() != size())
    throw InvalidArgumentError("join: " + std::to_string(directory.size()) + " addresses for a world of " +
                               std::to_string(size()));
  for (std::uint32_t r = 0; r < directory.size(); ++r) impl_->connector->set_address(r, std::move(directory[r]));
  impl_->start();
  if (impl_->options.full_mesh) connect_all();
}

void World::connect(std::uint32_t peer, milliseconds timeout) {
  if (peer >= size() || peer == rank())
    throw InvalidArgumentError("connect: " + std::to_string(peer) + " is not another rank of this world");
  const auto deadline = runtime::deadline_after(timeout.count() > 0 ? timeout : impl_->options.timeout);
  run_connect({peer}, deadline, true);
}

std::vector<std::uint32_t> World::connected() const { return session_->peers(); }

void World::connect_all() {
  std::vector<std::uint32_t> all;
  for (std::uint32_t p = 0; p < size(); ++p)
    if (p != rank()) all.push_back(p);
  run_connect(all, runtime::deadline_after(impl_->options.timeout), false);
}

void World::run_connect(const std::vector<std::uint32_t>& peers, std::chrono::steady_clock::time_point deadline,
                        bool ring) {
  auto& loop = session_->event_loop();
  if (loop.in_loop_thread()) throw InvalidArgumentError("World::connect blocks: call it off the session's loop thread");
  // Through the connector thread, so this never races a collective's own connects.
  auto done = std::make_shared<std::promise<std::optional<detail::Fault>>>();
  auto result = done->get_future();
  impl_->connector->post([connector = impl_->connector, peers, deadline, ring, done] {
    std::optional<detail::Fault> f;
    try {
      connector->connect_now(peers, deadline, ring);
    } catch (const detail::Fault& e) {
      f = e;
    }
    done->set_value(f);
  });
  if (!loop.wait(result, deadline + std::chrono::seconds(35)))
    throw TimeoutError("connecting to " + std::to_string(peers.size()) + " ranks did not finish");
  if (auto f = result.get()) std::rethrow_exception(make_error(make_error_code(f->status), f->what));
}

void World::submit(const std::shared_ptr<detail::WorldImpl>& impl, detail::CollectiveCall call, any_result done) {
  impl->submit(std::move(call), std::move(done));
}

template <class Start>
auto World::block_on(detail::CollectiveCall::Kind kind, milliseconds timeout, Start start) {
  auto& loop = session_->event_loop();
  if (loop.in_loop_thread())
    throw InvalidArgumentError(std::string(detail::to_string(kind)) +
                               " blocks: call it off the session's loop thread (or co_await async_*)");
  auto f = start(runtime::asio::use_future);
  // The collective times itself out; this only guards against a completion that never comes.
  const milliseconds limit = timeout.count() > 0 ? timeout : impl_->options.timeout;
  if (!loop.wait(f, runtime::deadline_after(limit + impl_->options.session.timeout + std::chrono::seconds(5))))
    throw TimeoutError("collective not complete after " + std::to_string(limit.count()) + " ms");
  return f.get();
}

void World::barrier(milliseconds timeout) {
  block_on(detail::CollectiveCall::Kind::barrier, timeout, [&](auto token) { return async_barrier(timeout, token); });
}

std::vector<std::byte> World::broadcast(std::vector<std::byte> data, std::uint32_t root, milliseconds timeout) {
  return block_on(detail::CollectiveCall::Kind::broadcast, timeout,
                  [&](auto token) { return async_broadcast(std::move(data), root, timeout, token); });
}

void World::all_gather(std::span<const std::byte> in, std::span<std::byte> out, milliseconds timeout) {
  block_on(detail::CollectiveCall::Kind::all_gather, timeout,
           [&](auto token) { return async_all_gather(in, out, timeout, token); });
}

Blocks World::all_gather_v(std::span<const std::byte> in, milliseconds timeout) {
  return block_on(detail::CollectiveCall::Kind::all_gather_v, timeout,
                  [&](auto token) { return async_all_gather_v(in, timeout, token); });
}

Blocks World::gather(std::span<const std::byte> in, std::uint32_t root, milliseconds timeout) {
  return block_on(detail::CollectiveCall::Kind::gather, timeout,
                  [&](auto token) { return async_gather(in, root, timeout, token); });
}

std::vector<std::byte> World::scatter(std::vector<std::span<const std::byte>> blocks, std::uint32_t root,
                                      milliseconds timeout) {
  return block_on(detail::CollectiveCall::Kind::scatter, timeout,
                  [&](auto token) { return async_scatter(std::move(blocks), root, timeout, token); });
}

void World::all_to_all(std::span<const std::byte> in, std::span<std::byte> out, milliseconds timeout) {
  block_on(detail::CollectiveCall::Kind::all_to_all, timeout,
           [&](auto token) { return async_all_to_all(in, out, timeout, token); });
}

Blocks World::all_to_all_v(std::vector<std::span<const std::byte>> blocks, milliseconds timeout) {
  return block_on(detail::CollectiveCall::Kind::all_to_all_v, timeout,
                  [&](auto token) { return async_all_to_all_v(std::move(blocks), timeout, token); });
}

void World::all_reduce(std::span<const std::byte> in, std::span<std::byte> out, DataType type, ReduceOp op,
                       milliseconds timeout) {
  block_on(detail::CollectiveCall::Kind::all_reduce, timeout,
           [&](auto token) { return async_all_reduce(in, out, type, op, timeout, token); });
}

void World::close() {
  if (!session_) return;
  if (impl_) {
    auto impl = impl_;
    session_->event_loop().call([impl] { impl->shutdown(); });
  }
  if (store_) store_->close();
  session_->close();  // fails what is in flight; blocked connects return
  if (impl_) {
    impl_->connector->stop();
    // The running collective (if any) finishes on the loop with ClosedError before we go.
    for (int i = 0; i < 600 && session_->event_loop().call([impl = impl_] { return impl->busy(); }); ++i)
      std::this_thread::sleep_for(milliseconds(5));
  }
  if (store_server_) store_server_->close();
}

}  // namespace hmc
