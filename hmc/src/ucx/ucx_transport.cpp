#include "ucx/ucx_transport.hpp"

#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "peer_log.hpp"
#include "security/auth.hpp"
#include "ucx/ucx_host_memory.hpp"
#include "ucx/ucx_worker_address.hpp"

namespace hmc::detail {

using runtime::log;

namespace {

constexpr unsigned kCtrlMessageId = 1;              // the active-message id of HMC's control fast path
constexpr std::chrono::milliseconds kLinger{2000};  // how long a lost peer's endpoint waits for UCX

error_code from_ucs(ucs_status_t s) {
  switch (s) {
    case UCS_OK: return {};
    case UCS_ERR_CANCELED: return make_error_code(Status::CANCELLED);
    case UCS_ERR_TIMED_OUT: return make_error_code(Status::TIMEOUT);
    case UCS_ERR_UNSUPPORTED: return make_error_code(Status::UNSUPPORT);
    case UCS_ERR_INVALID_PARAM: return make_error_code(Status::INVALID_ARGUMENT);
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR: return make_error_code(Status::PEER_LOST);
    default: return make_error_code(Status::ERROR);
  }
}

ucs_memory_type_t ucx_memory_type(MemoryType t) {
  switch (t) {
    case MemoryType::NVIDIA_GPU: return UCS_MEMORY_TYPE_CUDA;
    case MemoryType::AMD_GPU: return UCS_MEMORY_TYPE_ROCM;
    default: return UCS_MEMORY_TYPE_HOST;
  }
}

void check_ucs(ucs_status_t s, const char* what) {
  if (s != UCS_OK) throw Error(Status::ERROR, std::string(what) + " failed: " + ucs_status_string(s));
}

std::vector<std::byte> worker_address(ucp_worker_h worker, bool net_only) {
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
  attr.address_flags = net_only ? UCP_WORKER_ADDRESS_FLAG_NET_ONLY : 0;
  check_ucs(ucp_worker_query(worker, &attr), "ucp_worker_query");
  const auto* a = reinterpret_cast<const std::byte*>(attr.address);
  std::vector<std::byte> out(a, a + attr.address_length);
  ucp_worker_release_address(worker, attr.address);
  return out;
}

std::uint64_t random_token() {
  const Nonce n = random_nonce();
  std::uint64_t t = 0;
  std::memcpy(&t, n.data(), sizeof t);
  return t;
}

}  // namespace

UcxTransport::UcxTransport(runtime::EventLoop& loop, std::shared_ptr<UcxContext> context, ConnBuffer& buffer,
                           UcxOptions options)
    : loop_(loop),
      buffer_(buffer),
      options_(options),
      context_holder_(std::move(context)),
      context_(context_holder_->get()),
      regions_([ctx = context_](void* memh) { ucp_mem_unmap(ctx, static_cast<ucp_mem_h>(memh)); }),
      engine_(loop.executor(), *this, regions_, options.engine),
      linger_timer_(loop.executor()) {
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the loop thread touches the worker
  check_ucs(ucp_worker_create(context_, &wp, &worker_), "ucp_worker_create");
  check_ucs(ucp_worker_get_efd(worker_, &efd_), "ucp_worker_get_efd");
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kCtrlMessageId;
  hp.cb = &UcxTransport::on_active_message;
  hp.arg = this;
  check_ucs(ucp_worker_set_am_recv_handler(worker_, &hp), "ucp_worker_set_am_recv_handler");
  worker_address_ = worker_address(worker_, false);
  // Peers that cannot share our memory get this one: UCX then never tries shared memory with them.
  net_worker_address_ = worker_address(worker_, true);
  // A worker without shared-memory transports (UCX_TLS=tcp) shares memory with nobody: its peers
  // then get UCX's peer-failure mode, which shared memory would refuse (add_peer).
  if (worker_address_ != net_worker_address_) shm_domain_ = UcxPeerInfo::local_shm_domain();

  // A buffer UCX allocated is registered already (and shareable); anything else is mapped here.
  const auto* ucx_memory = dynamic_cast<const UcxHostMemory*>(&buffer_.memory());
  ucp_mem_h memh = ucx_memory != nullptr ? ucx_memory->memh_of(buffer_.data()) : nullptr;
  const bool owned = memh == nullptr;
  if (owned) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = buffer_.data();
    mp.length = buffer_.size();
    mp.memory_type = ucx_memory_type(buffer_.type());
    check_ucs(ucp_mem_map(context_, &mp, &memh), "ucp_mem_map");
  }
  regions_.set_buffer(RegionTable::Region{buffer_.data(), buffer_.size(), memh, owned, 0, false});
  void* rkey_buffer = nullptr;
  std::size_t rkey_len = 0;
  check_ucs(ucp_rkey_pack(context_, memh, &rkey_buffer, &rkey_len), "ucp_rkey_pack");
  const auto* r = static_cast<const std::byte*>(rkey_buffer);
  rkey_.assign(r, r + rkey_len);
  ucp_rkey_buffer_release(rkey_buffer);
  log().debug("ucx transport ready: buffer={} bytes ({}) worker address={} bytes ({} network only) rkey={} bytes",
              buffer_.size(), owned ? "registered" : "allocated by UCX", worker_address_.size(),
              net_worker_address_.size(), rkey_.size());
}

UcxTransport::~UcxTransport() {
  poller_.detach();
  for (auto rank : peers_.ranks()) remove_peer(rank, make_error_code(Status::CLOSED));
  linger_timer_.cancel();
  while (!lingering_.empty()) close_lingering(lingering_.begin());
  // UCX cannot abandon requests: progress until every endpoint close has come back, then briefly
  // for posts (a closed endpoint returns them at once, except those UCX 1.13 tcp loses for good),
  // sleeping on the worker's fd between rounds.
  const auto now = [] { return std::chrono::steady_clock::now(); };
  const auto close_limit = now() + std::chrono::seconds(2);
  auto post_limit = close_limit;
  while ((!closing_.empty() || engine_.posts_outstanding() != 0 || wireups_ != 0) &&
         now() < std::min(close_limit, post_limit)) {
    if (ucp_worker_progress(worker_) == 0 && done_posts_.empty() && done_closes_.empty() && wired_.empty() &&
        notify_flushed_.empty() && ucp_worker_arm(worker_) == UCS_OK) {
      pollfd p{efd_, POLLIN, 0};
      ::poll(&p, 1, 1);
    }
    process_completions();
    if (closing_.empty() && post_limit == close_limit) post_limit = now() + std::chrono::milliseconds(50);
  }
  if (engine_.posts_outstanding() != 0 || !closing_.empty() || wireups_ != 0)
    log().warn("ucx transport closed with {} posts, {} wireups and {} endpoint closes still in UCX",
               engine_.posts_outstanding(), wireups_, closing_.size());
  for (auto& p : closing_) {
    if (p->rkey) ucp_rkey_destroy(p->rkey);
    p->rkey = nullptr;
    // A flushing close to a peer that stopped consuming never ends: UCX completes it while the
    // worker is destroyed, and insists that it was released by then.
    if (p->close_request != nullptr) {
      p->close_released = true;
      ucp_request_free(std::exchange(p->close_request, nullptr));
    }
  }
  if (worker_) ucp_worker_destroy(worker_);
  peer_log_->flush();
}

void UcxTransport::attach() { poller_ = loop_.attach(*this); }

std::vector<std::byte> UcxTransport::local_info(std::uint32_t to, const LocalAddress& self) {
  // A fresh secret per peer and connection: `to` names itself with it on the fast path.
  if (auto it = fast_token_of_.find(to); it != fast_token_of_.end()) rank_of_token_.erase(it->second);
  std::uint64_t token = 0;
  do token = random_token();
  while (token == 0 || rank_of_token_.count(token) != 0);
  fast_token_of_[to] = token;
  rank_of_token_[token] = to;

  UcxPeerInfo info;
  info.rank = self.rank;
  info.buffer_base = reinterpret_cast<std::uintptr_t>(buffer_.data());
  info.buffer_size = buffer_.size();
  info.memory_type = static_cast<std::uint32_t>(buffer_.type());
  info.address_ip = self.ip;
  info.data_port = self.data_port;
  info.shm_domain = shm_domain_;
  info.worker_address = worker_address_;
  info.net_worker_address = net_worker_address_;
  info.rkey = rkey_;
  info.fast_token = token;
  return info.encode();
}

std::string UcxTransport::add_peer(std::uint32_t rank, std::span<const std::byte> bytes) {
  UcxPeerInfo info;
  if (std::string why = UcxPeerInfo::decode(bytes, info); !why.empty()) return why;
  return add_peer(rank, info);
}

std::string UcxTransport::add_peer(std::uint32_t rank, const UcxPeerInfo& info) {
  if (peers_.contains(rank)) return "rank " + std::to_string(rank) + " is connected already";
  if (info.rank != rank) return "peer info names rank " + std::to_string(info.rank);
  auto p = std::make_unique<Peer>();
  p->owner = this;
  p->record = PeerRecord{rank, info.address_ip, info.data_port, info.buffer_size};
  p->remote_base = info.buffer_base;
  p->fast_header = encode_fast_header(info.fast_token);
  // Shared memory only within one domain (same kernel, user and namespaces). UCX 1.13's posix and
  // sysv transports refuse peer-failure mode, so such a peer gets mode NONE and its death is seen
  // by the control socket; any other peer gets the network-only address and UCX's error callback.
  const bool shared = !shm_domain_.empty() && info.shm_domain == shm_domain_;
  p->peer_error_mode = !shared;
  // Checked by decode; zero padding keeps a transport's own parse of its part inside our copy.
  // ucp_ep_create unpacks the address during the call and keeps no pointer into it.
  std::vector<std::byte> address = shared || info.net_worker_address.empty() ? info.worker_address
                                                                             : info.net_worker_address;
  address.resize(address.size() + kWorkerAddressPadding);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ep.err_mode = p->peer_error_mode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  if (p->peer_error_mode) {
    ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.err_handler.cb = &UcxTransport::on_endpoint_error;
    ep.err_handler.arg = p.get();
  }
  ucs_status_t s = ucp_ep_create(worker_, &ep, &p->ep);
  if (s != UCS_OK) return std::string("ucp_ep_create: ") + ucs_status_string(s);
  s = ucp_ep_rkey_unpack(p->ep, info.rkey.data(), &p->rkey);
  if (s != UCS_OK) {
    close_endpoint(*p, true);
    closing_.push_back(std::move(p));
    return std::string("ucp_ep_rkey_unpack: ") + ucs_status_string(s);
  }
  // Usable once UCX has wired the endpoint up, which an endpoint flush waits for: UCX 1.13 tcp can
  // crash when a peer goes away while its connection is still being set up (docs/session.md).
  ucp_request_param_t fp{};
  fp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  fp.cb.send = &UcxTransport::on_wired;
  fp.user_data = p.get();
  ucs_status_ptr_t r = ucp_ep_flush_nbx(p->ep, &fp);
  if (UCS_PTR_IS_PTR(r)) ++wireups_;
  else wired_.emplace_back(p.get(), UCS_PTR_STATUS(r));
  poller_.kick();
  log().info("ucx peer rank {} connecting ({} bytes at {:#x}) over {}{}", rank, info.buffer_size, info.buffer_base,
             carriers_of(*p), shared ? "" : " (no shared memory with it)");
  peers_.add(rank, std::move(p));
  engine_.peer_added(rank);
  return {};
}

bool UcxTransport::reaches(const UcxPeerInfo& info, bool shared_memory) const {
  if (shared_memory && !shm_domain_.empty() && info.shm_domain == shm_domain_) return true;
  // add_peer dials the network-only address, or the whole one where the peer sent no other.
  const auto& theirs = info.net_worker_address.empty() ? info.worker_address : info.net_worker_address;
  return address_has_transports(net_worker_address_) && address_has_transports(theirs);
}

const PeerRecord* UcxTransport::peer(std::uint32_t rank) const { return peers_.record(rank); }

std::vector<std::uint32_t> UcxTransport::ranks() const { return peers_.ranks(); }

std::string UcxTransport::carriers(std::uint32_t rank) const {
  const Peer* p = find(rank);
  return p == nullptr ? std::string() : carriers_of(*p);
}

std::string UcxTransport::carriers_of(const Peer& p) const {
  // ucp_ep_print_info names each lane's transport ("... tcp/lo ...", "... posix/memory ...").
  char* text = nullptr;
  std::size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (f == nullptr) return {};
  ucp_ep_print_info(p.ep, f);
  std::fclose(f);
  std::string info(text, len);
  std::free(text);
  std::string out;
  for (const char* tl : {"tcp", "posix", "sysv", "cma", "xpmem", "knem", "self", "rc", "dc", "ud", "cuda", "rocm"}) {
    std::string name = tl;
    name += '/';
    for (std::size_t at = info.find(name); at != std::string::npos; at = info.find(name, at + 1)) {
      if (at > 0 && (info[at - 1] == ':' || info[at - 1] == ' ')) {  // "lane[0]:  0:tcp/lo.0 ..."
        if (!out.empty()) out += ',';  // appended, not "," + string: GCC 12 -O3 -Wstringop-overflow
        out += tl;
        break;
      }
    }
  }
  return out;
}

void UcxTransport::remove_peer(std::uint32_t rank, error_code reason) {
  if (auto it = fast_token_of_.find(rank); it != fast_token_of_.end()) {
    rank_of_token_.erase(it->second);
    fast_token_of_.erase(it);
  }
  std::unique_ptr<Peer> p = peers_.take(rank);
  if (p == nullptr) return;
  // Before the endpoint closes: every operation of the peer is aborted and posts nothing more.
  engine_.peer_removed(rank, reason);
  p->removed = true;
  release_held(*p);  // what waits for a flush in flight is failed when that flush returns
  const bool lost = reason == make_error_code(Status::PEER_LOST);
  log().info("ucx peer rank {} removed: {}", rank, reason.message());
  // A peer lost (the control channel says so) whose endpoint UCX still holds up closes once UCX
  // sees the loss too: UCX 1.13 tcp frees an endpoint it is discarding when the peer's hangup
  // arrives, then calls into it (docs/failure-model.md). Bounded by kLinger.
  if (p->peer_error_mode && lost && !p->failed) {
    p->linger_until = std::chrono::steady_clock::now() + kLinger;
    lingering_.push_back(std::move(p));
    arm_linger_timer();
    return;
  }
  // Force only where UCX allows it (peer mode); it refuses (and so never closes) any other endpoint.
  close_endpoint(*p, p->peer_error_mode);
  closing_.push_back(std::move(p));
}

void UcxTransport::close_lingering(std::list<std::unique_ptr<Peer>>::iterator it) {
  close_endpoint(**it, true);
  closing_.splice(closing_.end(), lingering_, it);
}

void UcxTransport::arm_linger_timer() {
  if (linger_timer_armed_ || lingering_.empty()) return;
  linger_timer_armed_ = true;
  linger_timer_.expires_at(lingering_.front()->linger_until);
  linger_timer_.async_wait([this, life = std::weak_ptr<int>(life_)](error_code) {
    if (!life.lock()) return;
    linger_timer_armed_ = false;
    const auto now = std::chrono::steady_clock::now();
    while (!lingering_.empty() && lingering_.front()->linger_until <= now) {
      log().info("ucx endpoint to lost rank {} closed after {} ms without a failure report",
                 lingering_.front()->record.rank, kLinger.count());
      close_lingering(lingering_.begin());
    }
    process_completions();
    arm_linger_timer();
  });
}

void UcxTransport::close_endpoint(Peer& p, bool force) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  param.cb.send = &UcxTransport::on_close_done;
  param.user_data = &p;
  ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &param);
  if (UCS_PTR_IS_PTR(r)) p.close_request = r;
  else done_closes_.emplace_back(&p, UCS_PTR_STATUS(r));
  poller_.kick();
}

void UcxTransport::submit(OpRequest request, Completion done) { engine_.submit(std::move(request), std::move(done)); }

std::uint64_t UcxTransport::register_region(void* base, std::size_t size, MemoryType type) {
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                  UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  mp.address = base;
  mp.length = size;
  mp.memory_type = ucx_memory_type(type);
  ucp_mem_h memh = nullptr;
  const ucs_status_t s = ucp_mem_map(context_, &mp, &memh);
  if (s != UCS_OK) throw Error(Status::ERROR, std::string("registering user memory: ") + ucs_status_string(s));
  return regions_.add(RegionTable::Region{base, size, memh, true, 0, false});
}

void UcxTransport::unregister_region(std::uint64_t id) { regions_.unregister(id); }

std::size_t UcxTransport::region_size(std::uint64_t id) const {
  const RegionTable::Region* r = regions_.find(id);
  return r == nullptr ? 0 : r->size;
}

PostResult UcxTransport::posted(ucs_status_ptr_t r, PostId token, const char* what, std::uint32_t rank) {
  if (r == nullptr) return {};            // done already; no callback follows
  if (UCS_PTR_IS_PTR(r)) armed_ = false;  // in flight: UCX may need progress that no event announces
  if (UCS_PTR_IS_ERR(r)) {                // the caller gets the error; a failing endpoint refuses every post
    log().debug("ucx {} to rank {} refused: {}", what, rank, ucs_status_string(UCS_PTR_STATUS(r)));
    return {from_ucs(UCS_PTR_STATUS(r)), false};
  }
  if (token == kNoPostId) {
    ucp_request_free(r);  // unsignalled: a later flush covers it
    return {};
  }
  // Callbacks run only inside ucp_worker_progress, so the token is in place before one can read it.
  std::memcpy(r, &token, sizeof token);
  return {{}, true};
}

PostResult UcxTransport::post_rma(std::uint32_t rank, bool is_put, std::uint64_t region, const Segment& s,
                                  PostId token) {
  const Peer* p = find(rank);
  if (p == nullptr) return {make_error_code(Status::PEER_LOST), false};
  const RegionTable::Region* local = regions_.in_use(region);
  if (local == nullptr) return {make_error_code(Status::INVALID_ARGUMENT), false};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
  param.memh = static_cast<ucp_mem_h>(local->handle);
  if (token != kNoPostId) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &UcxTransport::on_request_done;
    param.user_data = this;
  }
  void* at = static_cast<std::byte*>(local->base) + s.local_offset;
  const std::uint64_t remote = p->remote_base + s.remote_offset;
  ucs_status_ptr_t r = is_put ? ucp_put_nbx(p->ep, at, s.size, remote, p->rkey, &param)
                              : ucp_get_nbx(p->ep, at, s.size, remote, p->rkey, &param);
  return posted(r, token, is_put ? "put" : "get", rank);
}

PostResult UcxTransport::post_flush(std::uint32_t rank, PostId token) {
  const Peer* p = find(rank);
  if (p == nullptr) return {make_error_code(Status::PEER_LOST), false};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxTransport::on_request_done;
  param.user_data = this;
  return posted(ucp_ep_flush_nbx(p->ep, &param), token, "flush", rank);
}

PostResult UcxTransport::post_message(std::uint32_t rank, std::span<const std::byte> bytes, PostId token) {
  Peer* p = find(rank);
  if (p == nullptr) return {make_error_code(Status::PEER_LOST), false};
  if (p->held_head == p->held.size()) return send_message(*p, bytes, token);
  p->held.push_back(Peer::Held{token, bytes, true, UCS_OK});  // after a notify still flushing: in order
  return {{}, true};
}

// UCX 1.13's ucp_worker_fence only fences each interface (uct_iface_fence), and on shared memory
// puts (cma) and active messages (posix) use different ones: so the notify leaves once the endpoint
// flush is done. On shared memory that flush completes inline and the message leaves in the same
// call; over tcp it waits for the puts' acknowledgement (docs/transports.md "put_notify").
PostResult UcxTransport::post_notify(std::uint32_t rank, std::span<const std::byte> message, PostId token) {
  Peer* p = find(rank);
  if (p == nullptr) return {make_error_code(Status::PEER_LOST), false};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxTransport::on_notify_flushed;
  param.user_data = p;
  ucs_status_ptr_t f = ucp_ep_flush_nbx(p->ep, &param);
  if (UCS_PTR_IS_ERR(f)) {
    log().debug("ucx flush before a notify to rank {} refused: {}", rank, ucs_status_string(UCS_PTR_STATUS(f)));
    return {from_ucs(UCS_PTR_STATUS(f)), false};
  }
  if (f == nullptr && p->held_head == p->held.size()) return send_message(*p, message, token);
  const std::uint64_t seq = p->held_seq + p->held.size();
  p->held.push_back(Peer::Held{token, message, f == nullptr, UCS_OK});
  if (f != nullptr) {
    armed_ = false;
    std::memcpy(f, &seq, sizeof seq);  // callbacks run only inside ucp_worker_progress
  }
  return {{}, true};
}

PostResult UcxTransport::send_message(Peer& p, std::span<const std::byte> bytes, PostId token) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &UcxTransport::on_request_done;
  param.user_data = this;
  param.flags = UCP_AM_SEND_FLAG_EAGER;  // the receiver gets the data in its callback, in order
  // The header lives in the Peer (kept until the worker is gone): UCX 1.13 may read it until completion.
  ucs_status_ptr_t r = ucp_am_send_nbx(p.ep, kCtrlMessageId, p.fast_header.data(), p.fast_header.size(), bytes.data(),
                                       bytes.size(), &param);
  return posted(r, token, "fast-path message", p.record.rank);
}

// Sends (or, for a removed peer, fails) the held messages whose turn has come; reports each one
// that does not leave a UCX request behind.
void UcxTransport::release_held(Peer& p) {
  while (p.held_head < p.held.size() && p.held[p.held_head].ready) {
    const Peer::Held h = p.held[p.held_head++];
    PostResult r;
    if (p.removed) {
      r.error = make_error_code(Status::PEER_LOST);
    } else if (h.status != UCS_OK) {
      r.error = from_ucs(h.status);
    } else {
      r = send_message(p, h.bytes, h.token);
    }
    if (!r.pending) engine_.completed(h.token, r.error);
  }
  if (p.held_head == p.held.size()) {
    p.held_seq += p.held.size();
    p.held.clear();  // keeps its capacity
    p.held_head = 0;
  }
}

ucs_status_t UcxTransport::on_active_message(void* arg, const void* header, std::size_t header_length, void* data,
                                             std::size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  // The sender is the peer whose secret the header carries, never what the header claims otherwise.
  const auto token = parse_fast_header({static_cast<const std::byte*>(header), header_length});
  auto it = token ? self->rank_of_token_.find(*token) : self->rank_of_token_.end();
  if (it == self->rank_of_token_.end()) {
    if (self->dropped_messages_++ % 1000 == 0)
      log().error("ucx: dropped a fast-path message from an unknown sender ({} so far)", self->dropped_messages_);
    return UCS_OK;
  }
  const std::uint32_t rank = it->second;
  // We only send eager messages: a rendezvous one (its data not here) or an oversized one is refused
  // before anything is allocated for it.
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0 || length > self->options_.max_message) {
    self->misbehaving_.emplace_back(rank,
                                    "a fast-path message of " + std::to_string(length) + " bytes" +
                                        ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0
                                             ? " (rendezvous)"
                                             : ", over the limit of " + std::to_string(self->options_.max_message)));
    return UCS_OK;
  }
  const auto* bytes = static_cast<const std::byte*>(data);
  self->received_messages_.emplace_back(rank, std::vector<std::byte>(bytes, bytes + length));
  return UCS_OK;  // copied: UCX may reuse the data
}

bool UcxTransport::progress() {
  const unsigned n = ucp_worker_progress(worker_);
  const bool had = !done_posts_.empty() || !done_closes_.empty() || !failed_peers_.empty() ||
                   !received_messages_.empty() || !misbehaving_.empty() || !wired_.empty() || !notify_flushed_.empty();
  process_completions();
  if (n != 0 || had) armed_ = false;
  return n != 0 || had;
}

runtime::ArmResult UcxTransport::try_arm() {
  // A cycle that a submission caused, with nothing in flight and nothing found since the last arm:
  // the worker is still armed. A cycle the fd woke (no kick) always re-arms, which drains the fd.
  const bool kicked = std::exchange(kicked_, false);
  if (armed_ && kicked) return runtime::ArmResult::armed;
  const ucs_status_t s = ucp_worker_arm(worker_);
  armed_ = s == UCS_OK;
  if (s == UCS_OK) return runtime::ArmResult::armed;
  if (s != UCS_ERR_BUSY) log().warn("ucp_worker_arm: {}", ucs_status_string(s));
  return runtime::ArmResult::busy;
}

void UcxTransport::process_completions() {
  // UCX callbacks only record; the work happens here, outside ucp_worker_progress.
  while (!done_posts_.empty() || !done_closes_.empty() || !failed_peers_.empty() || !received_messages_.empty() ||
         !misbehaving_.empty() || !wired_.empty() || !notify_flushed_.empty()) {
    auto messages = std::move(received_messages_);
    received_messages_.clear();
    for (auto& [rank, bytes] : messages)
      if (on_message && fast_token_of_.count(rank) != 0) on_message(rank, bytes);  // not dropped meanwhile
    reported_posts_.swap(done_posts_);  // both keep their capacity: no allocation per completion
    for (auto [token, status] : reported_posts_) engine_.completed(token, from_ucs(status));
    reported_posts_.clear();
    auto flushed = std::move(notify_flushed_);
    notify_flushed_.clear();
    for (const NotifyFlushed& f : flushed) {
      Peer& p = *f.peer;
      Peer::Held& h = p.held.at(f.seq - p.held_seq);
      h.ready = true;
      h.status = f.status;
      release_held(p);
    }
    auto offenders = std::move(misbehaving_);
    misbehaving_.clear();
    for (auto& [rank, why] : offenders) {
      if (fast_token_of_.count(rank) == 0) continue;  // dropped already
      log().error("ucx: rank {} sent {}; disconnecting it{}", rank, why,
                  peer_fields(rank, "fast-path message", Status::PROTOCOL_ERROR));
      drop_failed_peer(rank, make_error_code(Status::PROTOCOL_ERROR));
    }
    auto failed = std::move(failed_peers_);
    failed_peers_.clear();
    for (auto [peer, status] : failed) {
      peer->failed = true;
      const std::uint32_t rank = peer->record.rank;
      auto lingering =
          std::find_if(lingering_.begin(), lingering_.end(), [peer = peer](const auto& q) { return q.get() == peer; });
      if (lingering != lingering_.end()) {
        close_lingering(lingering);
        continue;
      }
      if (find(rank) != peer) continue;  // already removed
      const std::string line = "ucx endpoint to rank " + std::to_string(rank) +
                               " failed: " + ucs_status_string(status) + peer_fields(rank, "data", Status::PEER_LOST);
      if (losses_expected_) {
        log().info("{} (the session is closing)", line);
      } else {
        peer_log_->warn(line);
      }
      drop_failed_peer(rank, make_error_code(Status::PEER_LOST));
    }
    auto wired = std::move(wired_);
    wired_.clear();
    for (auto [peer, status] : wired) {
      const std::uint32_t rank = peer->record.rank;
      if (find(rank) != peer) continue;  // removed meanwhile
      if (status != UCS_OK) {
        peer_log_->warn("ucx endpoint to rank " + std::to_string(rank) + " could not be set up: " +
                        ucs_status_string(status) + peer_fields(rank, "connect", Status::PEER_LOST));
        remove_peer(rank, make_error_code(Status::PEER_LOST));
        if (on_peer_failed) on_peer_failed(rank, make_error_code(Status::PEER_LOST));
        continue;
      }
      log().info("ucx peer rank {} ready", rank);
      if (on_peer_ready) on_peer_ready(rank);
    }
    auto closes = std::move(done_closes_);
    done_closes_.clear();
    for (auto [peer, status] : closes) {
      if (peer->rkey) ucp_rkey_destroy(peer->rkey);
      peer->rkey = nullptr;
      // UCX may still name this peer in a late error callback: keep it until the worker is gone.
      auto it =
          std::find_if(closing_.begin(), closing_.end(), [peer = peer](const auto& q) { return q.get() == peer; });
      if (it != closing_.end()) closed_.splice(closed_.end(), closing_, it);
    }
  }
}

// Callbacks record and free their request (freeing earlier would suppress the callback).
void UcxTransport::on_request_done(void* request, ucs_status_t status, void* user_data) {
  PostId token = kNoPostId;
  std::memcpy(&token, request, sizeof token);
  static_cast<UcxTransport*>(user_data)->done_posts_.emplace_back(token, status);
  ucp_request_free(request);
}

void UcxTransport::on_notify_flushed(void* request, ucs_status_t status, void* user_data) {
  auto* p = static_cast<Peer*>(user_data);
  std::uint64_t seq = 0;
  std::memcpy(&seq, request, sizeof seq);
  p->owner->notify_flushed_.push_back(NotifyFlushed{p, seq, status});
  ucp_request_free(request);
}

void UcxTransport::on_close_done(void* request, ucs_status_t status, void* user_data) {
  auto* p = static_cast<Peer*>(user_data);
  p->owner->done_closes_.emplace_back(p, status);
  p->close_request = nullptr;
  if (!p->close_released) ucp_request_free(request);
}

void UcxTransport::on_wired(void* request, ucs_status_t status, void* user_data) {
  auto* p = static_cast<Peer*>(user_data);
  --p->owner->wireups_;
  p->owner->wired_.emplace_back(p, status);
  ucp_request_free(request);
}

void UcxTransport::on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* p = static_cast<Peer*>(arg);
  if (p->ep == ep && p->rkey != nullptr) p->owner->failed_peers_.emplace_back(p, status);
}

}  // namespace hmc::detail
