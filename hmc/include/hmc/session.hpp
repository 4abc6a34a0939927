#pragma once
// A Session: one registered buffer, a control channel and one data transport (by default UCX for
// shared memory and RDMA and HMC's TCP path for other peers, chosen per peer; verbs when its peers
// connect over RDMA), on its own event loop thread (or driven by the caller's
// threads: ProgressThread). Peers are ranks; once
// connected either side can put to and get from the other.
// Every async_* operation takes an Asio completion token (use_awaitable, the default; use_future;
// a callback) and completes with a std::exception_ptr holding a typed hmc::Error (null on success). All
// members are safe from any thread; blocking ones throw InvalidArgumentError on the loop thread.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hmc/conn_buffer.hpp"
#include "hmc/ctrl_message.hpp"
#include "hmc/ctrl_options.hpp"
#include "hmc/kv_layout.hpp"
#include "hmc/memory_type.hpp"
#include "hmc/registered_memory.hpp"
#include "hmc/runtime/async_op.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "hmc/runtime/progress_mode.hpp"
#include "hmc/segment.hpp"
#include "hmc/session_stats.hpp"

namespace hmc {

namespace detail {
class SessionImpl;
inline constexpr std::uint64_t kForeignRegion = UINT64_MAX - 1;  // a RegisteredMemory of another session
}  // namespace detail

enum class ConnType { RDMA = 0, UCX = 1 };

// Which thread runs the session's event loop (docs/progress.md, "Progress modes").
enum class ProgressThread {
  own,     // a dedicated loop thread: progress happens whether or not the user calls in
  caller,  // no thread: blocking calls drive the loop while they wait, progress() drives it explicitly
  shared,  // (default) blocking calls drive the loop while they wait; a keeper thread drives it when none
           // has for 1 ms; handlers run one at a time on whichever of these threads drives
};

struct SessionOptions {
  std::size_t buffer_size = std::size_t{128} << 20;
  MemoryType mem_type = MemoryType::CPU;
  int device_id = 0;
  std::string local_ip = "127.0.0.1";  // the address peers know this session by
  runtime::ProgressMode progress_mode = runtime::ProgressMode::adaptive;
  ProgressThread progress_thread = ProgressThread::shared;
  std::string ucx_tls;          // e.g. "tcp" or "shm"; empty: UCX_TLS / UCX default
  std::string ucx_net_devices;  // e.g. "lo"; empty: UCX_NET_DEVICES / UCX default
  // false: same-host peers too go over the network path (HMC's checked TCP, or RDMA), e.g. between
  // containers whose shared memory is not shared, or to measure that path on one host.
  bool shared_memory = true;
  std::chrono::milliseconds timeout{30000};  // deadline of every operation and blocking wait
  std::size_t max_inflight = 1024;           // operations in the transport at once; more are queued
  // How long an idle peer without shared memory may stay silent before UCX declares it lost (the
  // tcp transport's socket keepalive: this, then 3 probes a fifth of it apart; with data in flight,
  // or on the side that did not open the connection, see docs/failure-model.md "Keepalive").
  // Zero keeps UCX's defaults and UCX_* variables.
  std::chrono::milliseconds ucx_keepalive{10000};
  bool fast_ctrl = true;  // once a peer's data connection is up, send control messages over it
  // The default data transport (docs/transports.md): what init_server serves first and what a connect
  // that names none uses. A session serves UCX and, where an RDMA device (or the emulation) exists,
  // RDMA at once; each client chooses one per connection. RDMA here opens the device at construction.
  ConnType conn_type = ConnType::UCX;
  std::string rdma_device;   // RDMA device (e.g. "mlx5_0"); empty: HMC_RDMA_DEVICE, else the first
  int rdma_device_port = 0;  // its port; 0: HMC_RDMA_PORT, else 1
  int rdma_gid_index = -1;   // RoCE GID index; -1: HMC_RDMA_GID_INDEX, else 0
  std::size_t num_chs = 1;   // RDMA: RC QPs per peer (both sides must agree)
  // TESTS ONLY: RDMA over the in-process emulated fabric (also HMC_VERBS_EMULATION=1); no byte
  // leaves the process. Never chosen unless asked for.
  bool verbs_emulation = false;
  // Device memory the transport cannot move (docs/gpu-staging.md) goes through this much
  // pinned host memory per device type, in pieces of staging_chunk bytes.
  std::size_t staging_bytes = std::size_t{8} << 20;
  std::size_t staging_chunk = std::size_t{1} << 20;
  // The job's shared key (docs/security.md "The key"); empty: HMC_AUTH_KEY, then the per-user key file.
  std::string auth_key;
  bool authenticate = true;  // false: accept unauthenticated peers (explicit opt-out, logged at warn)
  // != 0: stats() served at http://metrics_host:metrics_port/metrics in Prometheus' text format,
  // one endpoint for every session of the process naming that address. 0: HMC_METRICS_PORT if
  // set, else none.
  std::uint16_t metrics_port = 0;
  std::string metrics_host = "127.0.0.1";
  CtrlOptions ctrl = CtrlOptions::from_env();  // transport, TLS, heartbeats, resource limits
};

class Session {
 public:
  using handler = runtime::asio::any_completion_handler<void(std::exception_ptr)>;
  // Without a token, async_* return an awaitable: `co_await s.async_put(peer, 0, 0, n);`.
  using default_token = runtime::asio::use_awaitable_t<>;

  explicit Session(SessionOptions options = {});
  ~Session();  // close()
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  ConnBuffer& buffer() noexcept;
  const SessionOptions& options() const noexcept;
  // The session's loop: for coroutines that should run beside HMC, and for emitting cancellations.
  runtime::loop_executor executor() const noexcept;
  // The loop itself, for layers above that wait on their own operations with EventLoop::wait and
  // EventLoop::call (which drive it when the session's progress thread lets callers drive).
  runtime::EventLoop& event_loop() const noexcept;

  // Server role (reference names): control listener on ctrl_tcp_port (0: any free port) and its
  // Unix socket in ctrl_uds_dir. ucx_port / rdma_port is how clients address this session in
  // (ip, port) terms: a UCX client by ucx_port, an RDMA client by rdma_port (a port given as 0 is the
  // other's). Endpoints and QPs themselves are set up through the control channel. The session serves
  // UCX and RDMA at once, each client choosing (connect's conn); RDMA is set up for the first RDMA
  // client, and one is refused with the reason when no RDMA device exists. Only rdma_port given
  // makes RDMA the default and opens the device now.
  void init_server(const std::string& bind_ip, std::uint16_t ucx_port, std::uint16_t rdma_port,
                   std::uint16_t ctrl_tcp_port, std::uint32_t self_id, const std::string& ctrl_uds_dir = {});
  std::uint16_t ctrl_port() const;  // the bound control port

  // SDK form (the Python guide): rank 0, listening on ip:ctrl_port, the one public port; clients
  // that connect with the SDK form get ranks 1, 2, ... in the order they connect.
  // conn is the default transport (RDMA opens the device now); clients choose theirs either way.
  void init_server(const std::string& ip, std::uint16_t ctrl_port, ConnType conn = ConnType::UCX);
  // Stops accepting new peers; connected peers keep working both ways (close() ends everything).
  void close_server();
  // SessionOptions::local_ip after construction (reference name): the address a later init_server on
  // 0.0.0.0, or the first connect, advertises to peers; an address already advertised stays.
  void set_local_ip(const std::string& ip);

  // Client role: control connection + data connection both ways; returns the peer's rank (= peer_id).
  // conn: the data transport to this peer, sent in the authenticated handshake; a server that cannot
  // serve it refuses with its reason (UnsupportedError), as does this side without an RDMA device.
  // Peers of one session may use different transports; disconnect() and connect again to change one.
  // `timeout` bounds the whole connect (default: options().timeout); a refused connection is retried
  // until then, and a warning every 5 s says whom the call is still waiting for.
  std::uint32_t connect(std::uint32_t peer_id, std::uint32_t self_id, const std::string& peer_ip,
                        std::uint16_t data_port, std::uint16_t ctrl_tcp_port, ConnType conn = ConnType::UCX,
                        std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  // SDK form: this session's rank is assigned by the server; returns the server's rank.
  std::uint32_t connect(const std::string& ip, std::uint16_t ctrl_port, ConnType conn = ConnType::UCX,
                        std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // This session's rank; NotConnectedError until init_server() or connect() gave it one.
  std::uint32_t rank() const;

  // Waits until `rank` can be the target of put/get (a client connected to this server).
  void wait_peer(std::uint32_t rank, std::chrono::milliseconds timeout);
  std::vector<std::uint32_t> peers() const;
  // The one place the reference's (ip, data_port) addressing maps onto a rank. A peer is known by
  // the address it advertises and by the ip connect() reached it at; with a port only an exact
  // (ip, port) matches. NotConnectedError when no connected peer matches, InvalidArgumentError
  // naming every match when several do (e.g. two clients on one host without a port).
  std::uint32_t resolve_peer(const std::string& ip, std::optional<std::uint16_t> data_port) const;
  // resolve_peer() that waits (up to timeout) while no connected peer matches: a server naming a
  // client that has not connected yet. TimeoutError, or resolve_peer's InvalidArgumentError.
  std::uint32_t wait_peer_at(const std::string& ip, std::optional<std::uint16_t> data_port,
                             std::chrono::milliseconds timeout);
  // The default data transport (SessionOptions::conn_type, or RDMA for init_server with only an rdma_port).
  ConnType conn_type() const noexcept { return conn_type_.load(std::memory_order_relaxed); }
  // The transport carrying `rank`'s data (its client's choice); NotConnectedError when not connected.
  // Any thread, no loop hop.
  ConnType peer_conn(std::uint32_t rank) const;
  // For APIs that name the transport with each operation: InvalidArgumentError naming both when
  // `conn` does not carry `rank`; nothing for a rank not connected (the operation says so). Takes
  // no lock while no peer is on RDMA.
  void check_conn(std::uint32_t rank, ConnType conn) const;
  // Memory types the default transport moves itself (UCX: ucp_context_query; verbs: host memory);
  // device memory of any other type (the session buffer, registered memory) is staged through
  // pinned host bounce buffers.
  std::vector<MemoryType> native_memory_types() const;
  // Whether this session's buffer is device memory staged through a pinned host mirror.
  bool buffer_staged() const;
  // What carries the data to `rank`: UCX transports (e.g. "posix,cma" or "tcp"), or "rc" for RDMA
  // ("rc-emulated" over the emulated fabric); " (staged)" appended when either side's memory goes
  // through staging.
  std::string transports(std::uint32_t rank) const;
  // Counters since the session started: operations and bytes by kind, errors, sampled latency,
  // peers connected and lost, and per connected peer its transport and bytes (session_stats.hpp).
  SessionStats stats() const;

  // Completes when the bytes are visible in the peer's buffer.
  template <class Token = default_token>
  auto async_put(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size,
                 Token&& token = default_token{}) {
    return start_rma<Token>(true, false, peer, 0, Segment{local_off, remote_off, size}, 0, 0,
                            std::forward<Token>(token));
  }
  // Completes when the bytes are in this session's buffer.
  template <class Token = default_token>
  auto async_get(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size,
                 Token&& token = default_token{}) {
    return start_rma<Token>(false, false, peer, 0, Segment{local_off, remote_off, size}, 0, 0,
                            std::forward<Token>(token));
  }
  // Many segments, one completion (one endpoint flush for puts); segments that continue one another
  // on both sides travel as one (coalesce).
  template <class Token = default_token>
  auto async_put_batch(std::uint32_t peer, std::vector<Segment> segments, Token&& token = default_token{}) {
    coalesce(segments);
    return start_rma<Token>(true, false, peer, 0, std::move(segments), 0, 0, std::forward<Token>(token));
  }
  template <class Token = default_token>
  auto async_get_batch(std::uint32_t peer, std::vector<Segment> segments, Token&& token = default_token{}) {
    coalesce(segments);
    return start_rma<Token>(false, false, peer, 0, std::move(segments), 0, 0, std::forward<Token>(token));
  }
  // Blocks src_ids[i] of `local` to blocks dst_ids[i] of the peer's `remote` layout, every region,
  // as one batch. Bad ids or layouts throw InvalidArgumentError here, before anything is sent.
  template <class Token = default_token>
  auto async_put_blocks(std::uint32_t peer, const KvLayout& local, std::span<const std::uint64_t> src_ids,
                        const KvLayout& remote, std::span<const std::uint64_t> dst_ids,
                        Token&& token = default_token{}) {
    return async_put_batch(peer, local.segments_to(remote, src_ids, dst_ids, "src_ids", "dst_ids"),
                           std::forward<Token>(token));
  }
  // The peer's blocks src_ids[i] of its `remote` layout into blocks dst_ids[i] of `local`.
  template <class Token = default_token>
  auto async_get_blocks(std::uint32_t peer, const KvLayout& local, std::span<const std::uint64_t> src_ids,
                        const KvLayout& remote, std::span<const std::uint64_t> dst_ids,
                        Token&& token = default_token{}) {
    return async_get_batch(peer, local.segments_to(remote, dst_ids, src_ids, "dst_ids", "src_ids"),
                           std::forward<Token>(token));
  }
  // One range in `chunk`-byte pieces with at most `max_inflight` in flight (a sliding window).
  template <class Token = default_token>
  auto async_put_pipeline(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size,
                          std::size_t chunk, std::size_t max_inflight, Token&& token = default_token{}) {
    return start_rma<Token>(true, true, peer, 0, Segment{local_off, remote_off, size}, chunk, max_inflight,
                            std::forward<Token>(token));
  }
  template <class Token = default_token>
  auto async_get_pipeline(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size,
                          std::size_t chunk, std::size_t max_inflight, Token&& token = default_token{}) {
    return start_rma<Token>(false, true, peer, 0, Segment{local_off, remote_off, size}, chunk, max_inflight,
                            std::forward<Token>(token));
  }

  // Registers user memory (CPU, or device memory of a built backend) for put_from/get_into.
  RegisteredMemory register_memory(void* data, std::size_t size, MemoryType type = MemoryType::CPU);
  // put from / get into registered user memory instead of the session buffer: no staging copy.
  template <class Token = default_token>
  auto async_put_from(const RegisteredMemory& src, std::size_t src_off, std::uint32_t peer, std::size_t remote_off,
                      std::size_t size, Token&& token = default_token{}) {
    return start_rma<Token>(true, false, peer, region_of(src), Segment{src_off, remote_off, size}, 0, 0,
                            std::forward<Token>(token));
  }
  template <class Token = default_token>
  auto async_get_into(const RegisteredMemory& dst, std::size_t dst_off, std::uint32_t peer, std::size_t remote_off,
                      std::size_t size, Token&& token = default_token{}) {
    return start_rma<Token>(false, false, peer, region_of(dst), Segment{dst_off, remote_off, size}, 0, 0,
                            std::forward<Token>(token));
  }

  // A put, then `message` (a tag or bytes, as ctrl_send) to the peer's ctrl_recv, which never
  // delivers it before the put's bytes are visible there. Completes once the message is sent and the
  // local range may be reused. One operation instead of put + ctrl_send: the flush and the message
  // leave from the loop without a round trip through the caller. Before the peer's fast path is up
  // (or with fast_ctrl off) it is exactly put, then ctrl_send.
  template <class Token = default_token>
  auto async_put_notify(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size,
                        CtrlMessage message, Token&& token = default_token{}) {
    return start_put_notify<Token>(peer, 0, Segment{local_off, remote_off, size}, std::move(message),
                                   std::forward<Token>(token));
  }
  // A batch, then `message` to the peer's ctrl_recv, which never delivers it before every segment's
  // bytes are visible there (a KV transfer announced to its receiver in one operation).
  template <class Token = default_token>
  auto async_put_batch_notify(std::uint32_t peer, std::vector<Segment> segments, CtrlMessage message,
                              Token&& token = default_token{}) {
    coalesce(segments);
    return start_put_notify<Token>(peer, 0, std::move(segments), std::move(message), std::forward<Token>(token));
  }
  // put_blocks, then `message`, which the peer's ctrl_recv gets only once every block is visible.
  template <class Token = default_token>
  auto async_put_blocks_notify(std::uint32_t peer, const KvLayout& local, std::span<const std::uint64_t> src_ids,
                               const KvLayout& remote, std::span<const std::uint64_t> dst_ids, CtrlMessage message,
                               Token&& token = default_token{}) {
    return async_put_batch_notify(peer, local.segments_to(remote, src_ids, dst_ids, "src_ids", "dst_ids"),
                                  std::move(message), std::forward<Token>(token));
  }
  // put_blocks, get_blocks and put_blocks_notify with `mem` (registered user memory) in place of
  // the session buffer on this side: `local`'s offsets are offsets into it (a KV cache in a
  // registered tensor, moved zero-copy).
  template <class Token = default_token>
  auto async_put_blocks_from(const RegisteredMemory& mem, std::uint32_t peer, const KvLayout& local,
                             std::span<const std::uint64_t> src_ids, const KvLayout& remote,
                             std::span<const std::uint64_t> dst_ids, Token&& token = default_token{}) {
    std::vector<Segment> segments = local.segments_to(remote, src_ids, dst_ids, "src_ids", "dst_ids");
    coalesce(segments);
    return start_rma<Token>(true, false, peer, region_of(mem), std::move(segments), 0, 0, std::forward<Token>(token));
  }
  template <class Token = default_token>
  auto async_get_blocks_into(const RegisteredMemory& mem, std::uint32_t peer, const KvLayout& local,
                             std::span<const std::uint64_t> src_ids, const KvLayout& remote,
                             std::span<const std::uint64_t> dst_ids, Token&& token = default_token{}) {
    std::vector<Segment> segments = local.segments_to(remote, dst_ids, src_ids, "dst_ids", "src_ids");
    coalesce(segments);
    return start_rma<Token>(false, false, peer, region_of(mem), std::move(segments), 0, 0, std::forward<Token>(token));
  }
  template <class Token = default_token>
  auto async_put_blocks_from_notify(const RegisteredMemory& mem, std::uint32_t peer, const KvLayout& local,
                                    std::span<const std::uint64_t> src_ids, const KvLayout& remote,
                                    std::span<const std::uint64_t> dst_ids, CtrlMessage message,
                                    Token&& token = default_token{}) {
    std::vector<Segment> segments = local.segments_to(remote, src_ids, dst_ids, "src_ids", "dst_ids");
    coalesce(segments);
    return start_put_notify<Token>(peer, region_of(mem), std::move(segments), std::move(message),
                                   std::forward<Token>(token));
  }
  // The same from registered user memory.
  template <class Token = default_token>
  auto async_put_from_notify(const RegisteredMemory& src, std::size_t src_off, std::uint32_t peer,
                             std::size_t remote_off, std::size_t size, CtrlMessage message,
                             Token&& token = default_token{}) {
    return start_put_notify<Token>(peer, region_of(src), Segment{src_off, remote_off, size}, std::move(message),
                                   std::forward<Token>(token));
  }

  // Futures (reference names) and waits with a timeout; TimeoutError leaves the operation running.
  std::future<void> put_nb(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size);
  std::future<void> get_nb(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size);
  static void wait(std::future<void>& op, std::chrono::milliseconds timeout);
  static void wait(std::span<std::future<void>> ops, std::chrono::milliseconds timeout);

  // Blocking variants, each bounded by options().timeout.
  void put(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size);
  void get(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size);
  void put_batch(std::uint32_t peer, std::vector<Segment> segments);
  void get_batch(std::uint32_t peer, std::vector<Segment> segments);
  void put_pipeline(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size,
                    std::size_t chunk, std::size_t max_inflight);
  void get_pipeline(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size,
                    std::size_t chunk, std::size_t max_inflight);
  void put_notify(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size,
                  std::uint64_t tag);
  void put_batch_notify(std::uint32_t peer, std::vector<Segment> segments, std::uint64_t tag);
  void put_blocks(std::uint32_t peer, const KvLayout& local, std::span<const std::uint64_t> src_ids,
                  const KvLayout& remote, std::span<const std::uint64_t> dst_ids);
  void get_blocks(std::uint32_t peer, const KvLayout& local, std::span<const std::uint64_t> src_ids,
                  const KvLayout& remote, std::span<const std::uint64_t> dst_ids);
  void put_blocks_notify(std::uint32_t peer, const KvLayout& local, std::span<const std::uint64_t> src_ids,
                         const KvLayout& remote, std::span<const std::uint64_t> dst_ids, std::uint64_t tag);

  // Control messages, ordered per peer. A tag sent after a completed put never shows old data.
  template <class Token = default_token>
  auto async_ctrl_send(std::uint32_t peer, CtrlMessage message, Token&& token = default_token{}) {
    return runtime::async_on_loop<void(std::exception_ptr)>(
        executor(), std::forward<Token>(token), [impl = impl_, peer, m = std::move(message)](handler h) mutable {
          start_ctrl_send(impl, peer, std::move(m), std::move(h));
        });
  }
  template <class Token = default_token>
  auto async_ctrl_recv(std::uint32_t peer, std::chrono::milliseconds timeout, Token&& token = default_token{}) {
    return runtime::async_on_loop<void(std::exception_ptr, CtrlMessage)>(
        executor(), std::forward<Token>(token),
        [impl = impl_, peer,
         timeout](runtime::asio::any_completion_handler<void(std::exception_ptr, CtrlMessage)> h) mutable {
          start_ctrl_recv(impl, peer, timeout, std::move(h));
        });
  }
  void ctrl_send(std::uint32_t peer, std::uint64_t tag);
  std::uint64_t ctrl_recv(std::uint32_t peer, std::chrono::milliseconds timeout);

  // Completes once `count` tags equal to `tag` arrived from `peer` (the notify of put_notify,
  // put_batch_notify, put_blocks_notify, or a ctrl_send), each after the bytes it announces. They
  // are taken out of ctrl_recv's order; tags already received count; many waits may be pending
  // (at most 4096 per peer). TimeoutError after `timeout` (what it counted goes to the next wait
  // for that tag), PeerLostError once the peer is gone and not enough arrived.
  template <class Token = default_token>
  auto async_wait_notify(std::uint32_t peer, std::uint64_t tag, std::uint64_t count, std::chrono::milliseconds timeout,
                         Token&& token = default_token{}) {
    return runtime::async_on_loop<void(std::exception_ptr)>(
        executor(), std::forward<Token>(token), [impl = impl_, peer, tag, count, timeout](handler h) mutable {
          start_wait_notify(impl, peer, tag, count, timeout, std::move(h));
        });
  }
  void wait_notify(std::uint32_t peer, std::uint64_t tag, std::uint64_t count, std::chrono::milliseconds timeout);

  // ProgressThread::caller (or shared): runs the handlers that are ready and progresses the transport once,
  // never blocking; returns the handlers run (0 also while another thread drives). No-op with own thread.
  // With `stop`: returns as soon as stop() holds after a handler (e.g. once the awaited operation is
  // done), leaving the rest to the next call (the wakeup fd stays readable).
  std::size_t progress(const std::function<bool()>& stop = {});
  // The same for an outside selector that schedules its next call itself: `again` says that one is
  // due at once (a poller spins, handlers are left ready), instead of the wakeup fd (one write and read less).
  std::size_t progress(const std::function<bool()>& stop, bool& again);
  // ProgressThread::caller or shared: drives the loop on this thread until done() or the deadline (while
  // another thread drives, sleeps until done(), the deadline, or it leaves); returns done(). For
  // waits on operations started with callbacks (the Python layer). InvalidArgumentError with its
  // own thread or from the loop thread; done() must be safe to call from any thread.
  bool progress_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline);
  // ProgressThread::caller: readable while progress() has work (for an outside selector such as
  // asyncio's); owned by the session. InvalidArgumentError unless ProgressThread::caller.
  int wakeup_fd();

  // Drops one peer (its operations fail with PeerLostError); close() drops all and stops the loop.
  void disconnect(std::uint32_t peer);
  // Closes after a goodbye with every peer (docs/session.md "Closing"): what this session sent is
  // complete at its peers first, and each peer has what it needs before the connections go; a
  // silent peer delays it by 2 s at most. From the loop thread close() closes at once.
  template <class Token = default_token>
  auto async_close(Token&& token = default_token{}) {
    return runtime::async_on_loop<void(std::exception_ptr)>(
        executor(), std::forward<Token>(token), [impl = impl_](handler h) mutable { start_close(impl, std::move(h)); });
  }
  void close();

 private:
  void wait_ready(std::uint32_t rank, std::chrono::milliseconds timeout, bool dialled);
  std::uint32_t dial(const std::string& ip, std::uint16_t ctrl_port, ConnType conn,
                     std::optional<std::uint32_t> peer_id, std::optional<std::uint16_t> data_port,
                     std::optional<std::chrono::milliseconds> timeout);
  // One segment travels by value (nothing allocated per operation), a batch as its vector.
  static std::span<const Segment> segments_of(const Segment& s) noexcept { return {&s, 1}; }
  static std::span<const Segment> segments_of(const std::vector<Segment>& v) noexcept { return v; }

  template <class Token, class Segments>
  auto start_rma(bool is_put, bool pipeline, std::uint32_t peer, std::uint64_t region, Segments segments,
                 std::size_t chunk, std::size_t window, Token&& token) {
    return runtime::async_on_loop<void(std::exception_ptr)>(
        executor(), std::forward<Token>(token),
        [impl = impl_, is_put, pipeline, peer, region, segs = std::move(segments), chunk, window](handler h) mutable {
          start_rma_on_loop(impl, is_put, pipeline, peer, region, segments_of(segs), chunk, window, std::move(h));
        });
  }
  template <class Token, class Segments>
  auto start_put_notify(std::uint32_t peer, std::uint64_t region, Segments segments, CtrlMessage message,
                        Token&& token) {
    return runtime::async_on_loop<void(std::exception_ptr)>(
        executor(), std::forward<Token>(token),
        [impl = impl_, peer, region, segs = std::move(segments), m = std::move(message)](handler h) mutable {
          start_put_notify_on_loop(impl, peer, region, segments_of(segs), std::move(m), std::move(h));
        });
  }
  static void start_rma_on_loop(const std::shared_ptr<detail::SessionImpl>& impl, bool is_put, bool pipeline,
                                std::uint32_t peer, std::uint64_t region, std::span<const Segment> segments,
                                std::size_t chunk, std::size_t window, handler h);
  static void start_put_notify_on_loop(const std::shared_ptr<detail::SessionImpl>& impl, std::uint32_t peer,
                                       std::uint64_t region, std::span<const Segment> segments, CtrlMessage message,
                                       handler h);
  static void start_ctrl_send(const std::shared_ptr<detail::SessionImpl>& impl, std::uint32_t peer, CtrlMessage m,
                              handler h);
  static void start_close(const std::shared_ptr<detail::SessionImpl>& impl, handler h);
  static void start_wait_notify(const std::shared_ptr<detail::SessionImpl>& impl, std::uint32_t peer, std::uint64_t tag,
                                std::uint64_t count, std::chrono::milliseconds timeout, handler h);
  static void start_ctrl_recv(const std::shared_ptr<detail::SessionImpl>& impl, std::uint32_t peer,
                              std::chrono::milliseconds timeout,
                              runtime::asio::any_completion_handler<void(std::exception_ptr, CtrlMessage)> h);

  friend class RegisteredMemory;
  // An empty (moved-from) handle must never fall back to the session buffer (region 0), and a
  // handle of another session must never name one of ours (region ids are per session).
  std::uint64_t region_of(const RegisteredMemory& m) const noexcept {
    return !m ? UINT64_MAX : m.session_ != this ? detail::kForeignRegion : m.id();
  }
  void unregister_memory(std::uint64_t id) noexcept;

  std::unique_ptr<runtime::EventLoop> loop_;  // declared first: destroyed after everything it runs
  std::shared_ptr<detail::SessionImpl> impl_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // RegisteredMemory handles check it
  std::atomic<ConnType> conn_type_{ConnType::UCX};         // a copy of the loop's, for any thread
};

}  // namespace hmc
