#include "verbs/verbs_transport.hpp"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "peer_log.hpp"
#include "security/auth.hpp"
#include "verbs/verbs_peer_info.hpp"
#include "wire/byte_order.hpp"

namespace hmc::detail {

using runtime::log;

namespace {

// Work request ids: engine Tokens are user-space addresses (bit 63 clear); ours have it set, their
// kind in bits 60-62 and a number below.
constexpr std::uint64_t kInternal = std::uint64_t{1} << 63;
constexpr std::uint64_t kKind = kInternal | (std::uint64_t{7} << 60);
constexpr std::uint64_t kNumber = (std::uint64_t{1} << 60) - 1;
constexpr std::uint64_t kRecv = kInternal | (std::uint64_t{4} << 60);         // | the receive buffer's index
constexpr std::uint64_t kNotifyFlush = kInternal | (std::uint64_t{2} << 60);  // | a held notify's number
constexpr std::uint64_t kStripe = kInternal | (std::uint64_t{1} << 60);       // | a striped segment's number
constexpr std::uint64_t kRetire = kInternal | 1;  // a signal that only frees send-queue slots
constexpr std::uint64_t kHello = kInternal | 2;   // the zero-length SEND that proves the peer's QP is up
constexpr std::uint32_t kMaxWrBytes = 1u << 30;   // one work request moves at most this (IB allows 2^31)
constexpr int kPollBatch = 32;
constexpr unsigned int kAckBatch = 64;     // CQ events are acknowledged in batches (a mutex in rdma-core)
constexpr std::uint8_t kMaxRdAtomic = 16;  // RDMA READs in flight per QP

bool is_engine_token(std::uint64_t wr_id) { return wr_id != 0 && (wr_id & kInternal) == 0; }

error_code from_wc(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS: return {};
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR: return make_error_code(Status::PEER_LOST);
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR: return make_error_code(Status::PROTOCOL_ERROR);  // the peer's NIC refused it
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
    case IBV_WC_LOC_LEN_ERR: return make_error_code(Status::INVALID_ARGUMENT);
    default: return make_error_code(Status::ERROR);
  }
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 65535) throw InvalidConfigError(std::string(name) + "=" + v + " is not a number");
  return static_cast<int>(n);
}

std::string errno_text(const char* what) { return std::string(what) + " failed: " + std::strerror(errno); }

std::uint32_t random_psn() {
  const Nonce n = random_nonce();
  std::uint32_t v = 0;
  std::memcpy(&v, n.data(), sizeof v);
  return v & 0xffffff;
}

}  // namespace

VerbsTransport::VerbsTransport(runtime::EventLoop& loop, std::shared_ptr<VerbsApi> api, ConnBuffer& buffer,
                               VerbsOptions options)
    : loop_(loop), api_(std::move(api)), buffer_(buffer), options_(std::move(options)) {
  auto& o = options_;
  if (o.device.empty())
    if (const char* d = std::getenv("HMC_RDMA_DEVICE"); d != nullptr) o.device = d;
  if (o.port == 0) o.port = env_int("HMC_RDMA_PORT", 1);
  if (o.gid_index < 0) o.gid_index = env_int("HMC_RDMA_GID_INDEX", 0);
  if (o.num_chs == 0 || o.num_chs > VerbsPeerInfo::kMaxQps || o.sq_depth < 4 || o.recv_slots == 0 || o.slot_size < 64 ||
      o.send_slots == 0 || o.cq_depth < 16 || o.port < 1 || o.port > 255 || o.stripe_min < o.num_chs)
    throw InvalidConfigError("verbs transport: num_chs must be 1.." + std::to_string(VerbsPeerInfo::kMaxQps) +
                             ", sq_depth >= 4, slot_size >= 64, cq_depth >= 16, port 1..255, stripe_min >= num_chs");
  const std::vector<std::string> names = api_->devices();
  if (names.empty())
    throw UnsupportedError("ConnType::RDMA: no RDMA device found (" + api_->name() +
                           " lists none); use ConnType::UCX, or HMC_VERBS_EMULATION=1 for the in-process "
                           "emulated fabric (tests only)");
  const std::string name = o.device.empty() ? names.front() : o.device;
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string present;
    for (const auto& n : names) present += (present.empty() ? "" : ", ") + n;
    throw NotFoundError("RDMA device " + name + " (HMC_RDMA_DEVICE) not found; present: " + present);
  }
  port_ = static_cast<std::uint8_t>(o.port);
  gid_index_ = o.gid_index;
  device_name_ = name + ":" + std::to_string(o.port);
  try {
    if ((context_ = api_->open_device(name)) == nullptr)
      throw Error(Status::ERROR, errno_text(("opening " + name).c_str()));
    if (int rc = api_->query_port(context_, port_, port_attr_); rc != 0)
      throw InvalidConfigError("RDMA port " + device_name_ + " (HMC_RDMA_PORT): " + std::strerror(rc));
    if (port_attr_.state != IBV_PORT_ACTIVE) throw Error(Status::ERROR, "RDMA port " + device_name_ + " is not active");
    if (int rc = api_->query_gid(context_, port_, gid_index_, gid_); rc != 0) {
      if (port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET)
        throw InvalidConfigError("RoCE GID index " + std::to_string(gid_index_) + " (HMC_RDMA_GID_INDEX) of " +
                                 device_name_ + ": " + std::strerror(rc));
      gid_ = ibv_gid{};
    }
    if ((pd_ = api_->alloc_pd(context_)) == nullptr) throw Error(Status::ERROR, errno_text("ibv_alloc_pd"));
    if ((channel_ = api_->create_comp_channel(context_)) == nullptr)
      throw Error(Status::ERROR, errno_text("ibv_create_comp_channel"));
    // get_cq_event must say EAGAIN rather than block the loop.
    if (::fcntl(channel_->fd, F_SETFL, ::fcntl(channel_->fd, F_GETFL) | O_NONBLOCK) != 0)
      throw Error(Status::ERROR, errno_text("fcntl(O_NONBLOCK) on the completion channel"));
    if ((cq_ = api_->create_cq(context_, static_cast<int>(o.cq_depth), channel_)) == nullptr)
      throw Error(Status::ERROR, errno_text("ibv_create_cq"));
    buffer_mr_ = api_->reg_mr(pd_, buffer_.data(), buffer_.size(),
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (buffer_mr_ == nullptr) throw Error(Status::ERROR, errno_text("registering the session buffer (ibv_reg_mr)"));
    // Send buffers, then 8 bytes that flush READs land in.
    send_memory_.resize(std::size_t{o.send_slots} * o.slot_size + 8);
    send_mr_ = api_->reg_mr(pd_, send_memory_.data(), send_memory_.size(), IBV_ACCESS_LOCAL_WRITE);
    if (send_mr_ == nullptr) throw Error(Status::ERROR, errno_text("registering send buffers (ibv_reg_mr)"));
  } catch (...) {
    if (send_mr_) api_->dereg_mr(send_mr_);
    if (buffer_mr_) api_->dereg_mr(buffer_mr_);
    if (cq_) api_->destroy_cq(cq_);
    if (channel_) api_->destroy_comp_channel(channel_);
    if (pd_) api_->dealloc_pd(pd_);
    if (context_) api_->close_device(context_);
    throw;
  }
  for (std::uint32_t i = o.send_slots; i-- > 0;) free_slots_.push_back(i);
  regions_.emplace([api = api_](void* mr) { api->dereg_mr(static_cast<ibv_mr*>(mr)); });
  regions_->set_buffer(RegionTable::Region{buffer_.data(), buffer_.size(), buffer_mr_, true, 0, false});
  engine_.emplace(loop.executor(), static_cast<OpPoster&>(*this), *regions_, o.engine);
  psn_ = random_psn();
  log().info("verbs transport ready on {} ({}): buffer {} bytes, {} QP(s) per peer, link layer {}", device_name_,
             api_->name(), buffer_.size(), o.num_chs,
             port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand");
}

VerbsTransport::~VerbsTransport() {
  poller_.detach();
  on_message = nullptr;  // the owner is going away too: nothing reaches it from here on
  on_peer_ready = nullptr;
  on_peer_failed = nullptr;
  std::vector<std::uint32_t> ranks = this->ranks();
  for (auto rank : ranks) remove_peer(rank, make_error_code(Status::CLOSED));
  for (auto& [rank, p] : prepared_) destroy_peer(*p);
  prepared_.clear();
  // The QPs are in the error state: every signalled request comes back flushed, soon. Wait for
  // them (bounded), sleeping on the channel between rounds, before anything they use is freed.
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!closing_.empty() && std::chrono::steady_clock::now() < limit) {
    if (!progress() && try_arm() == runtime::ArmResult::armed) {
      pollfd p{channel_->fd, POLLIN, 0};
      ::poll(&p, 1, 1);
    }
  }
  if (!closing_.empty()) log().warn("verbs transport closed with {} peer(s) still flushing", closing_.size());
  for (auto& p : closing_) destroy_peer(*p);
  closing_.clear();
  ack_events();
  engine_.reset();
  regions_.reset();  // deregisters the buffer and user memory
  api_->dereg_mr(send_mr_);
  if (int rc = api_->destroy_cq(cq_); rc != 0) log().error("ibv_destroy_cq: {}", std::strerror(rc));
  if (int rc = api_->destroy_comp_channel(channel_); rc != 0)
    log().error("ibv_destroy_comp_channel: {}", std::strerror(rc));
  if (int rc = api_->dealloc_pd(pd_); rc != 0) log().error("ibv_dealloc_pd: {}", std::strerror(rc));
  api_->close_device(context_);
}

void VerbsTransport::attach() { poller_ = loop_.attach(*this); }

int VerbsTransport::fd() const { return channel_->fd; }

std::unique_ptr<VerbsTransport::Peer> VerbsTransport::make_peer(std::uint32_t rank) {
  auto p = std::make_unique<Peer>();
  p->record.rank = rank;
  const std::size_t recvs = options_.num_chs * options_.recv_slots;
  if (cq_used_ + recvs > options_.cq_depth) {
    log().error("verbs: no room in the CQ ({} entries) for rank {}'s receive buffers: too many peers",
                options_.cq_depth, rank);
    return p;
  }
  p->recv_memory.resize(recvs * options_.slot_size);
  p->recv_mr = api_->reg_mr(pd_, p->recv_memory.data(), p->recv_memory.size(), IBV_ACCESS_LOCAL_WRITE);
  if (p->recv_mr == nullptr) {
    log().error("verbs: {}", errno_text("registering receive buffers"));
    return p;
  }
  for (std::size_t c = 0; c < options_.num_chs; ++c) {
    ibv_qp_init_attr a{};
    a.send_cq = cq_;
    a.recv_cq = cq_;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = options_.sq_depth;
    a.cap.max_recv_wr = options_.recv_slots;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    ibv_qp* qp = api_->create_qp(pd_, a);
    if (qp == nullptr) {
      log().error("verbs: {}", errno_text("ibv_create_qp"));
      break;
    }
    p->qps.push_back(Qp{qp, {}, {}, 0, false});
    qp_owner_[qp->qp_num] = {p.get(), c};
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = port_;
    attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (int rc = api_->modify_qp(qp, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        rc != 0) {
      log().error("verbs: QP to INIT: {}", std::strerror(rc));
      break;
    }
    for (std::uint32_t i = 0; i < options_.recv_slots; ++i) {
      const std::size_t slot = c * options_.recv_slots + i;
      ibv_sge sge{reinterpret_cast<std::uintptr_t>(p->recv_memory.data() + slot * options_.slot_size),
                  options_.slot_size, p->recv_mr->lkey};
      ibv_recv_wr wr{};
      wr.wr_id = kRecv | slot;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      if (int rc = api_->post_recv(qp, &wr, &bad); rc != 0) {
        log().error("verbs: ibv_post_recv: {}", std::strerror(rc));
        break;
      }
    }
  }
  cq_used_ += recvs;
  p->cq_share = recvs;
  return p;
}

void VerbsTransport::destroy_peer(Peer& p) {
  for (const Held& h : p.held) held_by_id_.erase(h.id);
  p.held.clear();
  for (Qp& q : p.qps) {
    for (const Posted& r : q.posted)
      if (r.slot >= 0) free_slots_.push_back(static_cast<std::uint32_t>(r.slot));
    q.posted.clear();
    qp_owner_.erase(q.qp->qp_num);
    if (int rc = api_->destroy_qp(q.qp); rc != 0) log().error("ibv_destroy_qp: {}", std::strerror(rc));
  }
  p.qps.clear();
  if (p.recv_mr != nullptr) api_->dereg_mr(p.recv_mr);
  p.recv_mr = nullptr;
  cq_used_ -= p.cq_share;
  p.cq_share = 0;
}

std::vector<std::byte> VerbsTransport::local_info(std::uint32_t to, const LocalAddress& self) {
  // The peer's own info may have come first: add_peer then made and connected our QPs already.
  // Otherwise a new bootstrap replaces the QPs prepared for an earlier one.
  const Peer* p = live(to);
  if (p == nullptr) {
    if (auto it = prepared_.find(to); it != prepared_.end()) {
      destroy_peer(*it->second);
      prepared_.erase(it);
    }
    p = (prepared_[to] = make_peer(to)).get();
  }
  VerbsPeerInfo info;
  info.rank = self.rank;
  info.buffer_base = reinterpret_cast<std::uintptr_t>(buffer_.data());
  info.buffer_size = buffer_.size();
  info.rkey = buffer_mr_->rkey;
  info.memory_type = static_cast<std::uint32_t>(buffer_.type());
  info.address_ip = self.ip;
  info.data_port = self.data_port;
  info.lid = port_attr_.lid;
  std::memcpy(info.gid.data(), gid_.raw, info.gid.size());
  info.mtu = static_cast<std::uint8_t>(port_attr_.active_mtu);
  info.psn = psn_;
  // Fewer QPs than num_chs (resources ran out) makes the peer refuse us: both sides then drop.
  for (const Qp& q : p->qps) info.qp_nums.push_back(q.qp->qp_num);
  if (p->qps.size() != options_.num_chs) info.qp_nums.clear();
  return info.encode();
}

std::string VerbsTransport::add_peer(std::uint32_t rank, std::span<const std::byte> bytes) {
  if (peers_.contains(rank)) return "rank " + std::to_string(rank) + " is connected already";
  VerbsPeerInfo info;
  if (std::string why = VerbsPeerInfo::decode(bytes, info); !why.empty()) return why;
  if (info.rank != rank) return "peer info names rank " + std::to_string(info.rank);
  if (info.qp_nums.size() != options_.num_chs)
    return "the peer has " + std::to_string(info.qp_nums.size()) + " channels, this session " +
           std::to_string(options_.num_chs) + " (num_chs must match)";
  std::unique_ptr<Peer> p;
  if (auto it = prepared_.find(rank); it != prepared_.end()) {
    p = std::move(it->second);
    prepared_.erase(it);
  } else {
    p = make_peer(rank);  // its info came before our local_info: that one will name these QPs
  }
  if (p->qps.size() != options_.num_chs) {
    destroy_peer(*p);
    return "could not create " + std::to_string(options_.num_chs) + " QPs for rank " + std::to_string(rank);
  }
  const bool roce = port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET;
  for (std::size_t c = 0; c < p->qps.size(); ++c) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = std::min(port_attr_.active_mtu, static_cast<ibv_mtu>(info.mtu));
    a.dest_qp_num = info.qp_nums[c];
    a.rq_psn = info.psn;
    a.max_dest_rd_atomic = kMaxRdAtomic;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = port_;
    a.ah_attr.dlid = info.lid;
    if (roce) {
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, info.gid.data(), info.gid.size());
      a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(gid_index_);
      a.ah_attr.grh.hop_limit = 64;
    }
    int rc = api_->modify_qp(p->qps[c].qp, a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc == 0) {
      ibv_qp_attr s{};
      s.qp_state = IBV_QPS_RTS;
      s.timeout = 14;
      s.retry_cnt = 7;
      s.rnr_retry = 7;  // 7: retry for as long as the receiver has no buffer posted
      s.sq_psn = psn_;
      s.max_rd_atomic = kMaxRdAtomic;
      rc = api_->modify_qp(p->qps[c].qp, s,
                           IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                               IBV_QP_MAX_QP_RD_ATOMIC);
    }
    if (rc != 0) {
      destroy_peer(*p);
      return std::string("connecting QP ") + std::to_string(c) + ": " + std::strerror(rc);
    }
  }
  p->record = PeerRecord{rank, info.address_ip, info.data_port, info.buffer_size};
  p->remote_base = info.buffer_base;
  p->rkey = info.rkey;
  p->connected = true;
  Peer& peer = peers_.add(rank, std::move(p));
  engine_->peer_added(rank);
  // Ready once a SEND got through: the peer's QP is then RTR with receives posted.
  ++hellos_;
  Wr hello;
  hello.opcode = IBV_WR_SEND;
  hello.wr_id = kHello;
  hello.signalled = true;
  enqueue(peer, peer.qps.front(), hello);
  poller_.kick();
  log().info("verbs peer rank {} connecting ({} bytes at {:#x}, {} QP(s))", rank, info.buffer_size, info.buffer_base,
             info.qp_nums.size());
  return {};
}

const PeerRecord* VerbsTransport::peer(std::uint32_t rank) const { return peers_.record(rank); }

std::vector<std::uint32_t> VerbsTransport::ranks() const { return peers_.ranks(); }

std::string VerbsTransport::carriers(std::uint32_t rank) const {
  const Peer* p = live(rank);
  if (p == nullptr) return {};
  const std::string rc = api_->name() == "rdma-core" ? "rc" : "rc-" + api_->name();
  return p->qps.size() == 1 ? rc : rc + " (" + std::to_string(p->qps.size()) + " QPs)";
}

void VerbsTransport::remove_peer(std::uint32_t rank, error_code reason) {
  if (auto it = prepared_.find(rank); it != prepared_.end()) {
    destroy_peer(*it->second);
    prepared_.erase(it);
  }
  std::unique_ptr<Peer> p = peers_.take(rank);
  if (p == nullptr) return;
  p->closing = true;
  engine_->peer_removed(rank, reason);
  // What never reached the hardware is reported now; what did comes back flushed.
  for (Qp& q : p->qps) {
    for (const Wr& w : q.backlog) {
      if (w.wr_id == kHello) --hellos_;
      report(w.wr_id, reason);
    }
    q.backlog.clear();
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    if (int rc = api_->modify_qp(q.qp, a, IBV_QP_STATE); rc != 0)
      log().error("verbs: QP of rank {} to the error state: {}", rank, std::strerror(rc));
  }
  log().info("verbs peer rank {} removed: {}", rank, reason.message());
  closing_.push_back(std::move(p));
  reap_closing();
  poller_.kick();
}

void VerbsTransport::reap_closing() {
  for (auto it = closing_.begin(); it != closing_.end();) {
    if ((*it)->signalled != 0) {
      ++it;
      continue;
    }
    destroy_peer(**it);
    it = closing_.erase(it);
  }
}

void VerbsTransport::submit(OpRequest request, Completion done) {
  engine_->submit(std::move(request), std::move(done));
}

std::uint64_t VerbsTransport::register_region(void* base, std::size_t size, MemoryType) {
  ibv_mr* mr = api_->reg_mr(pd_, base, size, IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr) throw Error(Status::ERROR, errno_text("registering user memory (ibv_reg_mr)"));
  return regions_->add(RegionTable::Region{base, size, mr, true, 0, false});
}

void VerbsTransport::unregister_region(std::uint64_t id) { regions_->unregister(id); }

std::size_t VerbsTransport::region_size(std::uint64_t id) const {
  const RegionTable::Region* r = regions_->find(id);
  return r == nullptr ? 0 : r->size;
}

PostResult VerbsTransport::post_rma(std::uint32_t rank, bool is_put, std::uint64_t region, const Segment& s,
                                    PostId token) {
  Peer* p = live(rank);
  if (p == nullptr) return {make_error_code(Status::PEER_LOST), false};
  const RegionTable::Region* local = regions_->in_use(region);
  if (local == nullptr) return {make_error_code(Status::INVALID_ARGUMENT), false};
  const auto* mr = static_cast<const ibv_mr*>(local->handle);
  // A large segment is cut into one contiguous piece per QP, so that every QP (and the NIC's
  // engines behind them) moves a share; the engine still sees one post, reported once all are back.
  const std::size_t n_qps = p->qps.size();
  const std::size_t pieces = n_qps > 1 && s.size >= options_.stripe_min ? n_qps : 1;
  std::uint64_t wr_id = token;
  if (pieces > 1 && token != kNoPostId) {
    wr_id = kStripe | (next_stripe_id_++ & kNumber);
    gathers_[wr_id] = Gather{token, pieces, {}};
  }
  const std::size_t first = p->next_qp++;
  const std::size_t share = s.size / pieces, extra = s.size % pieces;  // the first `extra` pieces take a byte more
  std::size_t begin = 0;
  for (std::size_t i = 0; i < pieces; ++i) {
    const std::size_t n = share + (i < extra ? 1 : 0);
    Qp& q = p->qps[(first + i) % n_qps];
    post_piece(*p, q, is_put, reinterpret_cast<std::uintptr_t>(local->base) + s.local_offset + begin, mr->lkey,
               p->remote_base + s.remote_offset + begin, n, wr_id);
    if (is_put) q.dirty = true;
    begin += n;
  }
  return {{}, token != kNoPostId};
}

void VerbsTransport::post_piece(Peer& p, Qp& q, bool is_put, std::uint64_t local, std::uint32_t lkey,
                                std::uint64_t remote, std::size_t size, std::uint64_t wr_id) {
  // Work requests of one piece share a QP: the last one's completion implies the others'.
  for (std::size_t done = 0; done < size;) {
    const std::size_t n = std::min<std::size_t>(size - done, kMaxWrBytes);
    Wr w;
    w.opcode = is_put ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
    w.local = local + done;
    w.length = static_cast<std::uint32_t>(n);
    w.lkey = lkey;
    w.remote = remote + done;
    w.rkey = p.rkey;
    done += n;
    const bool last = done == size;
    w.wr_id = last ? wr_id : 0;
    w.signalled = last && wr_id != kNoPostId;
    enqueue(p, q, w);
  }
}

PostResult VerbsTransport::post_flush(std::uint32_t rank, PostId token) {
  Peer* p = live(rank);
  if (p == nullptr) return {make_error_code(Status::PEER_LOST), false};
  std::size_t dirty = 0;
  for (const Qp& q : p->qps) dirty += q.dirty ? 1 : 0;
  if (dirty == 0) return {};
  gathers_[token] = Gather{token, dirty, {}};
  for (Qp& q : p->qps) {
    if (!q.dirty) continue;
    q.dirty = false;
    enqueue(*p, q, flush_read(*p, token));
  }
  return {{}, true};
}

VerbsTransport::Wr VerbsTransport::flush_read(const Peer& p, std::uint64_t wr_id) const {
  // A READ behind the writes on the same QP completes only once the responder placed them.
  Wr w;
  w.opcode = IBV_WR_RDMA_READ;
  w.local = reinterpret_cast<std::uintptr_t>(send_memory_.data() + send_memory_.size() - 8);
  w.length = p.record.buffer_size != 0 ? 1 : 0;
  w.lkey = send_mr_->lkey;
  w.remote = p.remote_base;
  w.rkey = p.rkey;
  w.wr_id = wr_id;
  w.signalled = true;
  return w;
}

PostResult VerbsTransport::post_message(std::uint32_t rank, std::span<const std::byte> bytes, PostId token) {
  Peer* p = live(rank);
  if (p == nullptr) return {make_error_code(Status::PEER_LOST), false};
  if (bytes.empty() || bytes.size() > options_.max_message) return {make_error_code(Status::INVALID_ARGUMENT), false};
  if (p->held.empty()) return send_message(*p, bytes, token);
  p->held.push_back(Held{0, bytes, token, 0, {}});  // an earlier notify waits for its flush: after it
  return {{}, token != kNoPostId};
}

PostResult VerbsTransport::send_message(Peer& p, std::span<const std::byte> bytes, PostId token) {
  // Messages go on channel 0 only: one QP keeps them in order. Each fragment is signalled so
  // that its send buffer comes back even when nothing else is sent.
  Qp& q = p.qps.front();
  for (std::size_t off = 0; off < bytes.size();) {
    const bool first = off == 0;
    const std::size_t n = std::min<std::size_t>(bytes.size() - off, options_.slot_size - (first ? 4 : 0));
    Wr w;
    w.opcode = IBV_WR_SEND;
    w.local = reinterpret_cast<std::uintptr_t>(bytes.data() + off);
    w.length = static_cast<std::uint32_t>(n);
    w.has_header = first;
    w.header = static_cast<std::uint32_t>(bytes.size());
    off += n;
    w.wr_id = off == bytes.size() && token != kNoPostId ? token : kRetire;
    w.signalled = true;
    enqueue(p, q, w);
  }
  return {{}, token != kNoPostId};
}

PostResult VerbsTransport::post_notify(std::uint32_t rank, std::span<const std::byte> bytes, PostId token) {
  Peer* p = live(rank);
  if (p == nullptr) return {make_error_code(Status::PEER_LOST), false};
  if (bytes.empty() || bytes.size() > options_.max_message) return {make_error_code(Status::INVALID_ARGUMENT), false};
  // RC executes a QP's requests in order at the responder: the SEND on channel 0 lands after the
  // WRITEs before it there, and its acknowledgement follows theirs. Other channels need a flush first.
  p->qps.front().dirty = false;
  std::size_t dirty = 0;
  for (const Qp& q : p->qps) dirty += q.dirty ? 1 : 0;
  if (dirty == 0) return post_message(rank, bytes, token);
  const std::uint64_t id = kNotifyFlush | (next_notify_id_++ & kNumber);
  p->held.push_back(Held{id, bytes, token, dirty, {}});
  held_by_id_[id] = p;
  for (Qp& q : p->qps) {
    if (!q.dirty) continue;
    q.dirty = false;
    enqueue(*p, q, flush_read(*p, id));
  }
  return {{}, token != kNoPostId};
}

void VerbsTransport::enqueue(Peer& p, Qp& q, Wr wr) {
  if (q.backlog.empty() && try_post(p, q, wr)) return;
  q.backlog.push_back(wr);  // bounded by what callers submitted; drained in order as slots free
}

bool VerbsTransport::try_post(Peer& p, Qp& q, Wr& w) {
  if (q.posted.size() >= options_.sq_depth || cq_used_ >= options_.cq_depth) return false;
  std::int64_t slot = -1;
  ibv_sge sge{w.local, w.length, w.lkey};
  if (w.opcode == IBV_WR_SEND && (w.length != 0 || w.has_header)) {
    if (free_slots_.empty()) return false;
    slot = free_slots_.back();
    free_slots_.pop_back();
    std::byte* at = send_memory_.data() + static_cast<std::size_t>(slot) * options_.slot_size;
    const std::uint32_t head = w.has_header ? 4 : 0;
    if (w.has_header) store_le32(at, w.header);
    std::memcpy(at + head, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(w.local)), w.length);
    sge = ibv_sge{reinterpret_cast<std::uintptr_t>(at), w.length + head, send_mr_->lkey};
  }
  // A long run of unsignalled requests would fill the send queue with nothing to retire it.
  if (!w.signalled && q.unsignalled_run + 1 >= options_.sq_depth / 2) {
    w.signalled = true;
    w.wr_id = kRetire;
  }
  ibv_send_wr s{};
  s.wr_id = w.wr_id;
  s.opcode = w.opcode;
  s.send_flags = w.signalled ? IBV_SEND_SIGNALED : 0;
  s.sg_list = &sge;
  s.num_sge = sge.length != 0 ? 1 : 0;
  if (w.opcode != IBV_WR_SEND) {
    s.wr.rdma.remote_addr = w.remote;
    s.wr.rdma.rkey = w.rkey;
  }
  ibv_send_wr* bad = nullptr;
  if (int rc = api_->post_send(q.qp, &s, &bad); rc != 0) {
    if (slot >= 0) free_slots_.push_back(static_cast<std::uint32_t>(slot));
    log().error("verbs: ibv_post_send to rank {}: {}", p.record.rank, std::strerror(rc));
    if (w.wr_id == kHello) --hellos_;
    report(w.wr_id, make_error_code(Status::ERROR));
    peer_error(p, make_error_code(Status::PEER_LOST));
    return true;
  }
  q.posted.push_back(Posted{w.signalled, slot});
  q.unsignalled_run = w.signalled ? 0 : q.unsignalled_run + 1;
  ++cq_used_;
  ++p.cq_share;
  if (w.signalled) ++p.signalled;
  return true;
}

void VerbsTransport::drain_backlogs() {
  for (auto& [rank, p] : peers_)
    for (Qp& q : p->qps)
      while (!q.backlog.empty() && try_post(*p, q, q.backlog.front())) q.backlog.pop_front();
}

void VerbsTransport::report(std::uint64_t wr_id, error_code ec) {
  if ((wr_id & kKind) == kNotifyFlush) return release_notify(wr_id, ec);
  if ((wr_id & kKind) == kStripe) return release_gather(wr_id, ec);
  if (!is_engine_token(wr_id)) return;
  if ((wr_id & 1u) != 0) return release_gather(wr_id, ec);  // a flush: its READ on every dirty QP
  engine_->completed(wr_id, ec);
}

void VerbsTransport::release_gather(std::uint64_t id, error_code ec) {
  auto it = gathers_.find(id);
  if (it == gathers_.end()) return;
  Gather& g = it->second;
  if (ec && !g.error) g.error = ec;
  if (--g.left != 0) return;
  const Gather done = g;
  gathers_.erase(it);
  engine_->completed(done.token, done.error);
}

void VerbsTransport::release_notify(std::uint64_t id, error_code ec) {
  auto it = held_by_id_.find(id);
  if (it == held_by_id_.end()) return;
  Peer& p = *it->second;
  for (Held& h : p.held) {
    if (h.id != id) continue;
    if (ec && !h.error) h.error = ec;
    if (--h.left == 0) held_by_id_.erase(it);
    break;
  }
  release_held(p);
}

void VerbsTransport::release_held(Peer& p) {
  // In order: a message leaves only once every notify before it could (a removed peer's fail).
  while (!p.held.empty() && p.held.front().left == 0) {
    const Held h = p.held.front();
    p.held.pop_front();
    PostResult r{h.error, false};
    if (!r.error && p.closing) r.error = make_error_code(Status::PEER_LOST);
    if (!r.error) r = send_message(p, h.message, h.token);
    if (r.error && h.token != kNoPostId) engine_->completed(h.token, r.error);  // may post more: nothing held across it
  }
}

void VerbsTransport::peer_error(Peer& p, error_code ec) {
  if (p.closing || p.error) return;
  p.error = ec;
  failed_.emplace_back(p.record.rank, ec);
}

void VerbsTransport::handle(const ibv_wc& wc) {
  auto own = qp_owner_.find(wc.qp_num);
  if (own == qp_owner_.end()) return;  // a destroyed QP's late flush (never a signalled one)
  Peer& p = *own->second.first;
  Qp& q = p.qps[own->second.second];
  // The opcode is undefined in an error completion: the id tells receives from sends.
  if ((wc.wr_id & kKind) == kRecv) return handle_recv(p, q, wc);
  if (wc.wr_id != 0) {
    --p.signalled;
    if (wc.status == IBV_WC_SUCCESS) {
      // Completions come in posting order: everything up to this signalled request is done.
      while (!q.posted.empty()) {
        const Posted r = q.posted.front();
        q.posted.pop_front();
        if (r.slot >= 0) free_slots_.push_back(static_cast<std::uint32_t>(r.slot));
        --cq_used_;
        --p.cq_share;
        if (r.signalled) break;
      }
    }
  }
  error_code ec = from_wc(wc.status);
  if (wc.status != IBV_WC_SUCCESS) {
    if (wc.status != IBV_WC_WR_FLUSH_ERR && !p.closing)
      log().log(losses_expected_ ? spdlog::level::info : spdlog::level::warn,
                "verbs: work request to rank {} failed: {} ({}){}", p.record.rank, ibv_wc_status_str(wc.status),
                static_cast<int>(wc.status), peer_fields(p.record.rank, "data", status_of(ec)));
    // Requests flushed behind the one that failed report its error.
    if (wc.status == IBV_WC_WR_FLUSH_ERR && p.error) ec = p.error;
    peer_error(p, wc.status == IBV_WC_WR_FLUSH_ERR ? make_error_code(Status::PEER_LOST) : ec);
  }
  if (wc.wr_id == kHello) {
    --hellos_;
    if (!ec && !p.closing) ready_.push_back(p.record.rank);
  }
  report(wc.wr_id, ec);
}

void VerbsTransport::handle_recv(Peer& p, Qp& q, const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS) {
    peer_error(p, make_error_code(Status::PEER_LOST));
    return;
  }
  if (p.closing) return;
  const std::size_t slot = wc.wr_id & kNumber;
  std::byte* data = p.recv_memory.data() + slot * options_.slot_size;
  const std::size_t len = std::min<std::size_t>(wc.byte_len, options_.slot_size);
  auto misbehaving = [&](const std::string& why) {
    log().error("verbs: rank {} sent {}; disconnecting it{}", p.record.rank, why,
                peer_fields(p.record.rank, "message", Status::PROTOCOL_ERROR));
    if (!p.error) {
      p.error = make_error_code(Status::PROTOCOL_ERROR);
      failed_.emplace_back(p.record.rank, p.error);
    }
  };
  if (p.expected == 0 && len != 0) {
    const std::uint32_t total = len >= 4 ? load_le32(data) : 0;
    if (total == 0 || total > options_.max_message)
      return misbehaving("a fast-path message of " + std::to_string(total) + " bytes (limit " +
                         std::to_string(options_.max_message) + ")");
    p.partial.assign(data + 4, data + len);
    p.expected = total;
  } else if (len != 0) {
    p.partial.insert(p.partial.end(), data, data + len);
  }  // else: a zero-length SEND, the peer's connection probe
  if (p.expected != 0 && p.partial.size() > p.expected) return misbehaving("a fast-path message longer than it said");
  if (p.expected != 0 && p.partial.size() == p.expected) {
    received_.emplace_back(p.record.rank, std::move(p.partial));
    p.partial = {};
    p.expected = 0;
  }
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(data), options_.slot_size, p.recv_mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wc.wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = api_->post_recv(q.qp, &wr, &bad); rc != 0) {
    log().error("verbs: reposting a receive for rank {}: {}", p.record.rank, std::strerror(rc));
    peer_error(p, make_error_code(Status::PEER_LOST));
  }
}

std::size_t VerbsTransport::poll_some() {
  std::size_t total = 0;
  ibv_wc wcs[kPollBatch];
  for (int round = 0; round < 8; ++round) {
    const int n = api_->poll_cq(cq_, kPollBatch, wcs);
    if (n < 0) {  // the CQ itself failed (overflow): nothing on it can be trusted any more
      log().error("verbs: ibv_poll_cq failed ({}); dropping every peer", n);
      for (auto& [rank, p] : peers_) peer_error(*p, make_error_code(Status::PEER_LOST));
      break;
    }
    for (int i = 0; i < n; ++i) handle(wcs[i]);
    total += static_cast<std::size_t>(n);
    if (n < kPollBatch) break;
  }
  return total;
}

void VerbsTransport::ack_events() {
  if (unacked_events_ != 0) api_->ack_cq_events(cq_, unacked_events_);
  unacked_events_ = 0;
}

bool VerbsTransport::progress() {
  // Take every event the channel holds (acknowledged in batches), then empty the CQ.
  ibv_cq* ev = nullptr;
  bool events = false;
  while (api_->get_cq_event(channel_, &ev) == 0) {
    ++unacked_events_;
    events = true;
  }
  if (unacked_events_ >= kAckBatch) ack_events();
  std::size_t n = early_.size();
  for (const ibv_wc& wc : std::exchange(early_, {})) handle(wc);
  n += poll_some();
  drain_backlogs();
  // Callbacks last: they may remove peers or submit.
  for (auto& [rank, bytes] : std::exchange(received_, {}))
    if (on_message && live(rank) != nullptr) on_message(rank, bytes);
  for (std::uint32_t rank : std::exchange(ready_, {}))
    if (on_peer_ready && live(rank) != nullptr) on_peer_ready(rank);
  for (auto [rank, ec] : std::exchange(failed_, {})) {
    if (live(rank) == nullptr) continue;
    const error_code reason = ec == make_error_code(Status::PROTOCOL_ERROR) ? ec : make_error_code(Status::PEER_LOST);
    log().log(losses_expected_ ? spdlog::level::info : spdlog::level::warn,
              "verbs: connection to rank {} failed ({}); dropping it{}", rank, ec.message(),
              peer_fields(rank, "data", status_of(reason)));
    drop_failed_peer(rank, reason);
  }
  reap_closing();
  return events || n != 0;
}

runtime::ArmResult VerbsTransport::try_arm() {
  // Arm, then look once more: a completion that arrived before the arm raises no event.
  if (int rc = api_->req_notify_cq(cq_, 0); rc != 0) log().error("ibv_req_notify_cq: {}", std::strerror(rc));
  ibv_wc wcs[kPollBatch];
  const int n = api_->poll_cq(cq_, kPollBatch, wcs);
  if (n > 0) {
    early_.insert(early_.end(), wcs, wcs + n);
    return runtime::ArmResult::busy;
  }
  return runtime::ArmResult::armed;
}

}  // namespace hmc::detail
