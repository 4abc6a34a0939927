#include "ucx/ucx_transport.hpp"

#include <algorithm>
#include <optional>
#include <cstdio>
#include <cstring>
#include <cstdlib>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "ucx/ucx_host_memory.hpp"

namespace hmc::detail {

using runtime::log;

namespace {

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

}  // namespace

struct UcxTransport::Peer {
  UcxTransport* owner = nullptr;
  UcxPeerInfo info;
  ucp_ep_h ep = nullptr;
  ucp_rkey_h rkey = nullptr;
  bool peer_error_mode = false;  // UCX reports this peer's failure (remote hosts)
  std::vector<Op*> unflushed;    // puts waiting for the next endpoint flush
  bool flush_posted = false;
};

struct UcxTransport::FlushBatch {
  UcxTransport* owner = nullptr;
  std::uint32_t rank = 0;
  std::vector<Op*> ops;
};

struct UcxTransport::Op {
  UcxTransport* owner = nullptr;
  std::uint32_t rank = 0;
  bool is_put = false;
  bool pipeline = false;
  std::uint64_t region = 0;
  // Asio 1.26's any_completion_handler move assignment recurses forever: only ever construct it.
  std::optional<Completion> done;
  std::vector<Segment> segments;
  std::size_t chunk = 0, window = 0, issued = 0;  // pipeline: bytes issued so far
  std::size_t outstanding = 0;                    // UCX requests whose callback has not run
  error_code status;                              // first error
  bool started = false, queued = false, flushing = false, flushed = false, user_done = false;
  clock::time_point deadline{};
  std::list<Op*>::iterator deadline_it{};
  bool in_deadline_list = false;
  bool released = false;
  bool orphaned = false;  // its peer was removed: no longer counts against max_inflight
  std::vector<std::byte> message;   // an active message (ctrl fast path)
  std::uint32_t header = 0;         // its header (the sender's rank), alive until completion
};

namespace {
constexpr unsigned kCtrlMessageId = 1;  // the active-message id HMC's control messages use
}

UcxTransport::UcxTransport(runtime::EventLoop& loop, std::shared_ptr<UcxContext> context, ConnBuffer& buffer,
                           UcxOptions options)
    : loop_(loop),
      buffer_(buffer),
      options_(std::move(options)),
      context_holder_(std::move(context)),
      context_(context_holder_->get()),
      deadline_timer_(loop.executor()) {
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
  host_id_ = UcxPeerInfo::local_host_id();

  ucp_address_t* address = nullptr;
  std::size_t address_len = 0;
  check_ucs(ucp_worker_get_address(worker_, &address, &address_len), "ucp_worker_get_address");
  const auto* a = reinterpret_cast<const std::byte*>(address);
  worker_address_.assign(a, a + address_len);
  ucp_worker_release_address(worker_, address);

  // A buffer UCX allocated is registered already (and shareable); anything else is mapped here.
  const auto* ucx_memory = dynamic_cast<const UcxHostMemory*>(&buffer_.memory());
  ucp_mem_h memh = ucx_memory != nullptr ? ucx_memory->memh_of(buffer_.data()) : nullptr;
  const bool owned = memh == nullptr;
  if (owned) {
    ucp_mem_map_params_t mp{};
    mp.field_mask =
        UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = buffer_.data();
    mp.length = buffer_.size();
    mp.memory_type = ucx_memory_type(buffer_.type());
    check_ucs(ucp_mem_map(context_, &mp, &memh), "ucp_mem_map");
  }
  regions_[0] = Region{buffer_.data(), buffer_.size(), memh, 0, false, owned};
  void* rkey_buffer = nullptr;
  std::size_t rkey_len = 0;
  check_ucs(ucp_rkey_pack(context_, memh, &rkey_buffer, &rkey_len), "ucp_rkey_pack");
  const auto* r = static_cast<const std::byte*>(rkey_buffer);
  rkey_.assign(r, r + rkey_len);
  ucp_rkey_buffer_release(rkey_buffer);
  log().debug("ucx transport ready: buffer={} bytes ({}) worker address={} bytes rkey={} bytes", buffer_.size(),
              owned ? "registered" : "allocated by UCX", worker_address_.size(), rkey_.size());
}

UcxTransport::~UcxTransport() {
  poller_.detach();
  deadline_timer_.cancel();
  std::vector<std::uint32_t> ranks;
  for (const auto& [rank, p] : peers_) ranks.push_back(rank);
  for (auto rank : ranks) remove_peer(rank, make_error_code(Status::CLOSED));
  // UCX cannot abandon requests: progress until every endpoint close and request has come back.
  const auto limit = clock::now() + std::chrono::seconds(2);
  while ((!closing_.empty() || started_ops_ != 0) && clock::now() < limit) {
    ucp_worker_progress(worker_);
    process_completions();
  }
  if (started_ops_ != 0 || !closing_.empty())
    log().warn("ucx transport closed with {} operations and {} endpoint closes still in UCX", started_ops_,
               closing_.size());
  for (auto& p : closing_)
    if (p->rkey) ucp_rkey_destroy(p->rkey);
  for (auto& [id, r] : regions_)
    if (r.owned) ucp_mem_unmap(context_, r.memh);
  if (worker_) ucp_worker_destroy(worker_);
}

void UcxTransport::attach() { poller_ = loop_.attach(*this); }

UcxPeerInfo UcxTransport::local_info(std::uint32_t self_rank, const std::string& ip, std::uint16_t data_port) {
  self_rank_ = self_rank;
  UcxPeerInfo info;
  info.rank = self_rank;
  info.buffer_base = reinterpret_cast<std::uintptr_t>(buffer_.data());
  info.buffer_size = buffer_.size();
  info.memory_type = static_cast<std::uint32_t>(buffer_.type());
  info.address_ip = ip;
  info.data_port = data_port;
  info.host_id = host_id_;
  info.worker_address = worker_address_;
  info.rkey = rkey_;
  return info;
}

bool UcxTransport::add_peer(const UcxPeerInfo& info, std::string& why) {
  if (peers_.count(info.rank) != 0) remove_peer(info.rank, make_error_code(Status::PEER_LOST));
  auto p = std::make_unique<Peer>();
  p->owner = this;
  p->info = info;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = reinterpret_cast<const ucp_address_t*>(p->info.worker_address.data());
  // UCX 1.13's shared-memory transports (posix, sysv) refuse peer-failure mode, so a same-host peer
  // gets mode NONE and shared memory; its death is seen through the control socket instead.
  p->peer_error_mode = info.host_id.empty() || info.host_id != host_id_;
  ep.err_mode = p->peer_error_mode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  if (p->peer_error_mode) {
    ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.err_handler.cb = &UcxTransport::on_endpoint_error;
    ep.err_handler.arg = p.get();
  }
  ucs_status_t s = ucp_ep_create(worker_, &ep, &p->ep);
  if (s != UCS_OK) {
    why = std::string("ucp_ep_create: ") + ucs_status_string(s);
    return false;
  }
  s = ucp_ep_rkey_unpack(p->ep, p->info.rkey.data(), &p->rkey);
  if (s != UCS_OK) {
    why = std::string("ucp_ep_rkey_unpack: ") + ucs_status_string(s);
    close_endpoint(*p, true);
    closing_.push_back(std::move(p));
    return false;
  }
  poller_.kick();
  log().info("ucx peer rank {} ready ({} bytes at {:#x}) over {}", info.rank, info.buffer_size, info.buffer_base,
             transports_in_use_of(*p));
  peers_[info.rank] = std::move(p);
  return true;
}

const UcxPeerInfo* UcxTransport::peer(std::uint32_t rank) const {
  auto it = peers_.find(rank);
  return it == peers_.end() ? nullptr : &it->second->info;
}

std::vector<std::uint32_t> UcxTransport::ranks() const {
  std::vector<std::uint32_t> out;
  for (const auto& [rank, p] : peers_) out.push_back(rank);
  return out;
}

std::string UcxTransport::transports_in_use(std::uint32_t rank) const {
  auto it = peers_.find(rank);
  return it == peers_.end() ? std::string() : transports_in_use_of(*it->second);
}

std::string UcxTransport::transports_in_use_of(const Peer& p) const {
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
    const std::string name = std::string(tl) + "/";
    for (std::size_t at = info.find(name); at != std::string::npos; at = info.find(name, at + 1)) {
      if (at > 0 && (info[at - 1] == ':' || info[at - 1] == ' ')) {  // "lane[0]:  0:tcp/lo.0 ..."
        out += (out.empty() ? "" : ",") + std::string(tl);
        break;
      }
    }
  }
  return out;
}

void UcxTransport::remove_peer(std::uint32_t rank, error_code reason) {
  auto it = peers_.find(rank);
  if (it == peers_.end()) return;
  std::unique_ptr<Peer> p = std::move(it->second);
  peers_.erase(it);
  std::vector<Op*> affected;
  for (Op* op : by_deadline_)
    if (op->rank == rank) affected.push_back(op);
  for (Op* op : affected) {
    if (op->queued) {
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), op));
      op->queued = false;
    }
    finish(op, reason);
  }
  for (Op* op : p->unflushed) op->flushing = false;  // the flush will never be issued
  for (Op* op : affected) maybe_release(op);
  for (Op* op : p->unflushed) maybe_release(op);
  p->unflushed.clear();
  // A force-closed endpoint may never return some requests (seen with UCX 1.13 tcp gets): their
  // ops stop counting against max_inflight now and are freed when UCX returns them or with us.
  for (const auto& owned : ops_) {
    Op* op = owned.get();
    if (op->rank == rank && op->started && !op->released && !op->orphaned) {
      op->orphaned = true;
      --started_ops_;
    }
  }
  start_waiting_ops();
  // Force only where UCX allows it (peer mode) or the peer is gone; a live peer gets a flushing close.
  close_endpoint(*p, p->peer_error_mode || reason == make_error_code(Status::PEER_LOST));
  closing_.push_back(std::move(p));
  log().info("ucx peer rank {} removed: {}", rank, reason.message());
}

void UcxTransport::close_endpoint(Peer& p, bool force) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  param.cb.send = &UcxTransport::on_close_done;
  param.user_data = &p;
  ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &param);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) done_closes_.emplace_back(&p, r == nullptr ? UCS_OK : UCS_PTR_STATUS(r));
  poller_.kick();
}

UcxTransport::Op* UcxTransport::new_op(RmaRequest request, Completion done) {
  Op* op = nullptr;
  if (!free_ops_.empty()) {
    op = free_ops_.back();
    free_ops_.pop_back();
    op->done.reset();
    *op = Op{};
  } else {
    op = ops_.emplace_back(std::make_unique<Op>()).get();
  }
  op->owner = this;
  op->rank = request.rank;
  op->is_put = request.is_put;
  op->region = request.region;
  op->pipeline = request.chunk != 0;
  op->chunk = request.chunk;
  op->window = request.window;
  op->segments = std::move(request.segments);
  op->message = std::move(request.message);
  op->done.emplace(std::move(done));
  ++regions_.at(op->region).users;
  ++live_ops_;
  return op;
}

void UcxTransport::submit(RmaRequest request, Completion done) { enqueue(new_op(std::move(request), std::move(done))); }

std::uint64_t UcxTransport::register_region(void* base, std::size_t size, MemoryType type) {
  ucp_mem_map_params_t mp{};
  mp.field_mask =
      UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  mp.address = base;
  mp.length = size;
  mp.memory_type = ucx_memory_type(type);
  ucp_mem_h memh = nullptr;
  const ucs_status_t s = ucp_mem_map(context_, &mp, &memh);
  if (s != UCS_OK) throw Error(Status::ERROR, std::string("registering user memory: ") + ucs_status_string(s));
  const std::uint64_t id = next_region_++;
  regions_[id] = Region{base, size, memh, 0, false, true};
  return id;
}

void UcxTransport::unregister_region(std::uint64_t id) {
  auto it = regions_.find(id);
  if (id == 0 || it == regions_.end() || it->second.unregistered) return;
  it->second.unregistered = true;
  release_region(id);
}

void UcxTransport::release_region(std::uint64_t id) {
  auto it = regions_.find(id);
  if (it == regions_.end() || !it->second.unregistered || it->second.users != 0) return;
  ucp_mem_unmap(context_, it->second.memh);
  regions_.erase(it);
}

std::size_t UcxTransport::region_size(std::uint64_t id) const {
  auto it = regions_.find(id);
  return it == regions_.end() || it->second.unregistered ? 0 : it->second.size;
}

void UcxTransport::enqueue(Op* op) {
  op->deadline = clock::now() + options_.timeout;
  op->deadline_it = by_deadline_.insert(by_deadline_.end(), op);
  op->in_deadline_list = true;
  arm_deadline_timer();
  if (started_ops_ >= options_.max_inflight) {
    op->queued = true;  // backpressure: never rejected, started as others finish
    waiting_.push_back(op);
    return;
  }
  start(op);
}

void UcxTransport::start(Op* op) {
  ++started_ops_;
  op->started = true;
  if (peers_.count(op->rank) == 0) {
    finish(op, make_error_code(Status::PEER_LOST));
    maybe_release(op);
    return;
  }
  if (!op->message.empty()) {
    issue_message(op);
  } else if (op->pipeline) {
    issue_pipeline_chunks(op);
  } else {
    issue_segments(op);
  }
  poller_.kick();  // a submission after arming: progress-then-arm must run again
  op_step(op);
}

bool UcxTransport::issue_one(Op* op, const Segment& s, bool with_callback) {
  Peer& p = *peers_.at(op->rank);
  const Region& region = regions_.at(op->region);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
  param.memh = region.memh;
  if (with_callback) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &UcxTransport::on_request_done;
    param.user_data = op;
  }
  void* local = static_cast<std::byte*>(region.base) + s.local_offset;
  const std::uint64_t remote = p.info.buffer_base + s.remote_offset;
  ucs_status_ptr_t r = op->is_put ? ucp_put_nbx(p.ep, local, s.size, remote, p.rkey, &param)
                                  : ucp_get_nbx(p.ep, local, s.size, remote, p.rkey, &param);
  if (r == nullptr) return true;
  if (UCS_PTR_IS_ERR(r)) {
    if (!op->status) op->status = from_ucs(UCS_PTR_STATUS(r));
    log().warn("ucx {} to rank {} failed: {}", op->is_put ? "put" : "get", op->rank,
               ucs_status_string(UCS_PTR_STATUS(r)));
    return false;
  }
  if (with_callback) {
    ++op->outstanding;  // the callback frees the request
  } else {
    ucp_request_free(r);  // no callback: completion is observed through the endpoint flush
  }
  return true;
}

void UcxTransport::issue_message(Op* op) {
  Peer& p = *peers_.at(op->rank);
  op->header = self_rank_;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &UcxTransport::on_request_done;
  param.user_data = op;
  param.flags = UCP_AM_SEND_FLAG_EAGER;  // the receiver gets the data in its callback, in order
  ucs_status_ptr_t r = ucp_am_send_nbx(p.ep, kCtrlMessageId, &op->header, sizeof op->header, op->message.data(),
                                       op->message.size(), &param);
  if (r == nullptr) return;
  if (UCS_PTR_IS_ERR(r)) {
    if (!op->status) op->status = from_ucs(UCS_PTR_STATUS(r));
    return;
  }
  ++op->outstanding;
}

ucs_status_t UcxTransport::on_active_message(void* arg, const void* header, std::size_t header_length, void* data,
                                             std::size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  // Eager data is readable during this callback (we copy it); only rendezvous would need a receive.
  if (header_length != sizeof(std::uint32_t) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    log().error("ucx: dropped a malformed control active message ({} header bytes)", header_length);
    return UCS_OK;
  }
  std::uint32_t rank = 0;
  std::memcpy(&rank, header, sizeof rank);
  const auto* bytes = static_cast<const std::byte*>(data);
  self->received_messages_.emplace_back(rank, std::vector<std::byte>(bytes, bytes + length));
  return UCS_OK;  // copied: UCX may reuse the data
}

void UcxTransport::issue_segments(Op* op) {
  for (const Segment& s : op->segments)
    if (!issue_one(op, s, /*with_callback=*/!op->is_put)) break;
  if (op->is_put && !op->status) request_flush(*peers_.at(op->rank), op);
}

void UcxTransport::issue_pipeline_chunks(Op* op) {
  const Segment& whole = op->segments.front();
  while (!op->status && op->issued < whole.size && op->outstanding < op->window) {
    const std::size_t n = std::min(op->chunk, whole.size - op->issued);
    const Segment piece{whole.local_offset + op->issued, whole.remote_offset + op->issued, n};
    op->issued += n;
    if (!issue_one(op, piece, /*with_callback=*/true)) break;
  }
}

void UcxTransport::request_flush(Peer& p, Op* op) {
  op->flushing = true;
  p.unflushed.push_back(op);
  if (p.flush_posted) return;
  p.flush_posted = true;
  // One flush covers every put issued to this peer before it runs: posted, so a burst shares it.
  asio::post(loop_.executor(), [this, rank = op->rank, life = std::weak_ptr<int>(life_)] {
    if (life.lock()) flush_now(rank);
  });
}

void UcxTransport::flush_now(std::uint32_t rank) {
  auto it = peers_.find(rank);
  if (it == peers_.end()) return;
  Peer& p = *it->second;
  p.flush_posted = false;
  auto* batch = new FlushBatch{this, rank, std::move(p.unflushed)};
  p.unflushed.clear();
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxTransport::on_flush_done;
  param.user_data = batch;
  ucs_status_ptr_t r = ucp_ep_flush_nbx(p.ep, &param);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) {
    done_flushes_.emplace_back(batch, r == nullptr ? UCS_OK : UCS_PTR_STATUS(r));
    process_completions();
  }
  poller_.kick();
}

void UcxTransport::op_step(Op* op) {
  if (op->pipeline && !op->status) {
    issue_pipeline_chunks(op);
    poller_.kick();
    if (op->outstanding == 0 && op->issued == op->segments.front().size && op->is_put && !op->flushed &&
        !op->flushing && peers_.count(op->rank) != 0) {
      request_flush(*peers_.at(op->rank), op);
    }
  }
  const bool pipeline_done = !op->pipeline || op->status || op->issued == op->segments.front().size;
  const bool put_flushed = !op->is_put || !op->pipeline || op->status || op->flushed;
  if (op->outstanding == 0 && !op->flushing && pipeline_done && put_flushed) finish(op, op->status);
  maybe_release(op);
}

void UcxTransport::finish(Op* op, error_code ec) {
  if (op->in_deadline_list) {
    by_deadline_.erase(op->deadline_it);
    op->in_deadline_list = false;
  }
  if (op->user_done) return;
  op->user_done = true;
  Completion done(std::move(*op->done));
  op->done.reset();
  runtime::complete_later(loop_.executor(), std::move(done), ec);
}

void UcxTransport::maybe_release(Op* op) {
  if (op->released || !op->user_done || op->outstanding != 0 || op->flushing || op->queued) return;
  op->released = true;
  if (op->started && !op->orphaned) --started_ops_;
  --regions_.at(op->region).users;
  release_region(op->region);
  --live_ops_;
  free_ops_.push_back(op);
  start_waiting_ops();
}

void UcxTransport::start_waiting_ops() {
  while (!waiting_.empty() && started_ops_ < options_.max_inflight) {
    Op* op = waiting_.front();
    waiting_.pop_front();
    op->queued = false;
    start(op);
  }
}

void UcxTransport::arm_deadline_timer() {
  if (deadline_timer_armed_ || by_deadline_.empty()) return;
  deadline_timer_armed_ = true;
  deadline_timer_.expires_at(by_deadline_.front()->deadline);
  deadline_timer_.async_wait([this, life = std::weak_ptr<int>(life_)](error_code ec) {
    if (!life.lock()) return;
    deadline_timer_armed_ = false;
    if (!ec) expire_deadlines();
    arm_deadline_timer();
  });
}

void UcxTransport::expire_deadlines() {
  const auto now = clock::now();
  while (!by_deadline_.empty() && by_deadline_.front()->deadline <= now) {
    Op* op = by_deadline_.front();
    if (op->queued) {
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), op));
      op->queued = false;
    }
    // UCX cannot cancel an RMA in flight: the caller hears "timeout", the op lives until UCX is done.
    finish(op, make_error_code(Status::TIMEOUT));
    maybe_release(op);
  }
}

bool UcxTransport::progress() {
  const unsigned n = ucp_worker_progress(worker_);
  const bool had = !done_requests_.empty() || !done_flushes_.empty() || !done_closes_.empty() ||
                   !failed_peers_.empty() || !received_messages_.empty();
  process_completions();
  return n != 0 || had;
}

runtime::ArmResult UcxTransport::try_arm() {
  const ucs_status_t s = ucp_worker_arm(worker_);
  if (s == UCS_OK) return runtime::ArmResult::armed;
  if (s != UCS_ERR_BUSY) log().warn("ucp_worker_arm: {}", ucs_status_string(s));
  return runtime::ArmResult::busy;
}

void UcxTransport::process_completions() {
  // UCX callbacks only record; the work happens here, outside ucp_worker_progress.
  while (!done_requests_.empty() || !done_flushes_.empty() || !done_closes_.empty() || !failed_peers_.empty() ||
         !received_messages_.empty()) {
    auto messages = std::move(received_messages_);
    received_messages_.clear();
    for (auto& [rank, bytes] : messages)
      if (on_message) on_message(rank, std::move(bytes));
    auto requests = std::move(done_requests_);
    done_requests_.clear();
    for (auto [op, status] : requests) {
      --op->outstanding;
      if (status != UCS_OK && !op->status) op->status = from_ucs(status);
      op_step(op);
    }
    auto flushes = std::move(done_flushes_);
    done_flushes_.clear();
    for (auto [batch, status] : flushes) {
      for (Op* op : batch->ops) {
        if (!op->flushing) continue;  // its peer was removed meanwhile
        op->flushing = false;
        op->flushed = true;
        if (status != UCS_OK && !op->status) op->status = from_ucs(status);
        op_step(op);
      }
      delete batch;
    }
    auto failed = std::move(failed_peers_);
    failed_peers_.clear();
    for (auto [peer, status] : failed) {
      const std::uint32_t rank = peer->info.rank;
      auto it = peers_.find(rank);
      if (it == peers_.end() || it->second.get() != peer) continue;  // already removed
      log().warn("ucx endpoint to rank {} failed: {}", rank, ucs_status_string(status));
      remove_peer(rank, make_error_code(Status::PEER_LOST));
      if (on_peer_failed) on_peer_failed(rank, make_error_code(Status::PEER_LOST));
    }
    auto closes = std::move(done_closes_);
    done_closes_.clear();
    for (auto [peer, status] : closes) {
      if (peer->rkey) ucp_rkey_destroy(peer->rkey);
      peer->rkey = nullptr;
      // UCX may still name this peer in a late error callback: keep it until the worker is gone.
      auto it = std::find_if(closing_.begin(), closing_.end(), [peer = peer](const auto& q) { return q.get() == peer; });
      if (it != closing_.end()) closed_.splice(closed_.end(), closing_, it);
    }
  }
}

// Callbacks record and free their request (freeing earlier would suppress the callback).
void UcxTransport::on_request_done(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<Op*>(user_data);
  op->owner->done_requests_.emplace_back(op, status);
  ucp_request_free(request);
}

void UcxTransport::on_flush_done(void* request, ucs_status_t status, void* user_data) {
  auto* batch = static_cast<FlushBatch*>(user_data);
  batch->owner->done_flushes_.emplace_back(batch, status);
  ucp_request_free(request);
}

void UcxTransport::on_close_done(void* request, ucs_status_t status, void* user_data) {
  auto* p = static_cast<Peer*>(user_data);
  p->owner->done_closes_.emplace_back(p, status);
  ucp_request_free(request);
}

void UcxTransport::on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* p = static_cast<Peer*>(arg);
  if (p->ep == ep && p->rkey != nullptr) p->owner->failed_peers_.emplace_back(p, status);
}

}  // namespace hmc::detail
