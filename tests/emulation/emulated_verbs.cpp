// EMULATION of an RDMA fabric (see emulated_verbs.hpp): tests only, never picked silently.
#include "emulated_verbs.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace hmc::detail {

namespace {

using Clock = std::chrono::steady_clock;
// How long a work request waits for a peer QP that is not ready (or has no receive posted) before
// it fails, like the RC retry / RNR retry counters running out.
constexpr std::chrono::milliseconds kRetryLimit{2000};

struct EmuContext : ibv_context {};
struct EmuPd : ibv_pd {};
struct EmuMr : ibv_mr {
  int access = 0;
};
struct EmuCq;
struct EmuChannel : ibv_comp_channel {
  std::deque<EmuCq*> events;
};
struct Cqe {
  ibv_wc wc{};
  std::uint32_t qpn = 0;  // a send completion retires its QP's work requests up to seq
  std::uint64_t seq = 0;
};
struct EmuCq : ibv_cq {
  EmuChannel* ch = nullptr;
  std::size_t capacity = 0;
  std::deque<Cqe> cqes;
  bool armed = false;
  bool overflowed = false;
  unsigned int taken = 0, acked = 0;
};
struct SendWr {
  ibv_send_wr wr{};
  std::vector<ibv_sge> sges;
  std::uint64_t seq = 0;
  Clock::time_point due{};
  Clock::time_point blocked_since{};
};
struct RecvWr {
  std::uint64_t wr_id = 0;
  std::vector<ibv_sge> sges;
};
struct EmuQp : ibv_qp {
  EmuCq* scq = nullptr;
  EmuCq* rcq = nullptr;
  std::uint32_t max_send = 0, max_recv = 0;
  std::uint32_t remote_qpn = 0;
  std::deque<SendWr> sq;
  std::deque<RecvWr> rq;
  std::uint64_t posted = 0, retired = 0;  // send work requests: the slots in use are posted - retired
};

}  // namespace

struct EmulatedFabric::State {
  std::uint32_t next_qpn = 0x100;
  std::uint32_t next_key = 0x1000;
  std::map<std::uint32_t, EmuQp*> qps;
  std::map<std::uint32_t, EmuMr*> mrs_by_lkey;
  std::map<std::uint32_t, EmuMr*> mrs_by_rkey;
  std::set<EmuCq*> cqs;
  std::map<ibv_pd*, int> pd_users;
  int fail_count = 0;
  int fail_skip = 0;
  std::size_t largest_rdma = 0;
  ibv_wc_status fail_status = IBV_WC_SUCCESS;
  std::chrono::milliseconds delay{0};
  Stats stats;

  enum class Outcome { done, blocked };

  void push(EmuCq* cq, const Cqe& c) {
    if (cq->cqes.size() >= cq->capacity) {
      cq->overflowed = true;
      ++stats.cq_overflows;
      return;
    }
    cq->cqes.push_back(c);
    stats.max_cq_fill = std::max(stats.max_cq_fill, cq->cqes.size());
    if (cq->armed && cq->ch != nullptr) {  // the arm contract: one event per arming
      cq->armed = false;
      cq->ch->events.push_back(cq);
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t n = ::write(cq->ch->fd, &one, sizeof one);
    }
  }

  static ibv_wc_opcode send_opcode(ibv_wr_opcode op) {
    switch (op) {
      case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
      case IBV_WR_SEND:
      case IBV_WR_SEND_WITH_IMM: return IBV_WC_SEND;
      default: return IBV_WC_RDMA_WRITE;
    }
  }

  void complete_send(EmuQp& q, const SendWr& w, ibv_wc_status status) {
    if (status == IBV_WC_SUCCESS && (w.wr.send_flags & IBV_SEND_SIGNALED) == 0) return;
    Cqe c;
    c.wc.wr_id = w.wr.wr_id;
    c.wc.status = status;
    c.wc.opcode = send_opcode(w.wr.opcode);
    c.wc.qp_num = q.qp_num;
    c.qpn = q.qp_num;
    c.seq = w.seq;
    push(q.scq, c);
  }

  // The error state: everything outstanding completes with a flush error (unsignalled ones too).
  void to_error(EmuQp& q) {
    if (q.state == IBV_QPS_ERR) return;
    q.state = IBV_QPS_ERR;
    while (!q.sq.empty()) {
      SendWr w = std::move(q.sq.front());
      q.sq.pop_front();
      w.wr.send_flags |= IBV_SEND_SIGNALED;
      complete_send(q, w, IBV_WC_WR_FLUSH_ERR);
    }
    while (!q.rq.empty()) {
      Cqe c;
      c.wc.wr_id = q.rq.front().wr_id;
      c.wc.status = IBV_WC_WR_FLUSH_ERR;
      c.wc.opcode = IBV_WC_RECV;
      c.wc.qp_num = q.qp_num;
      q.rq.pop_front();
      push(q.rcq, c);
    }
  }

  void fail(EmuQp& q, SendWr w, ibv_wc_status status) {
    w.wr.send_flags |= IBV_SEND_SIGNALED;  // an error always completes
    complete_send(q, w, status);
    to_error(q);
  }

  // A local scatter/gather element in registered memory of the QP's PD, or nullptr.
  const EmuMr* local_mr(const EmuQp& q, const ibv_sge& s, int need) const {
    auto it = mrs_by_lkey.find(s.lkey);
    if (it == mrs_by_lkey.end() || it->second->pd != q.pd) return nullptr;
    const EmuMr* mr = it->second;
    const auto base = reinterpret_cast<std::uintptr_t>(mr->addr);
    if ((mr->access & need) != need || s.addr < base || s.length > mr->length || s.addr - base > mr->length - s.length)
      return nullptr;
    return mr;
  }

  const EmuMr* remote_mr(const EmuQp& peer, std::uint64_t addr, std::uint32_t rkey, std::size_t len, int need) const {
    auto it = mrs_by_rkey.find(rkey);
    if (it == mrs_by_rkey.end() || it->second->pd != peer.pd) return nullptr;
    const EmuMr* mr = it->second;
    const auto base = reinterpret_cast<std::uintptr_t>(mr->addr);
    if ((mr->access & need) != need || addr < base || len > mr->length || addr - base > mr->length - len)
      return nullptr;
    return mr;
  }

  Outcome execute(EmuQp& q, Clock::time_point now) {
    SendWr& w = q.sq.front();
    auto it = qps.find(q.remote_qpn);
    EmuQp* peer = it == qps.end() ? nullptr : it->second;
    const bool peer_ready = peer != nullptr && (peer->state == IBV_QPS_RTR || peer->state == IBV_QPS_RTS) &&
                            peer->remote_qpn == q.qp_num;
    const bool rnr = peer_ready && (w.wr.opcode == IBV_WR_SEND || w.wr.opcode == IBV_WR_SEND_WITH_IMM) &&
                     peer->rq.empty();
    if (!peer_ready || rnr) {
      // A peer QP in the error state or gone never answers: the retries run out.
      if (w.blocked_since == Clock::time_point{}) w.blocked_since = now;
      const bool hopeless = !rnr && (peer == nullptr || peer->state == IBV_QPS_ERR || peer->state == IBV_QPS_RESET);
      if (!hopeless && now - w.blocked_since < kRetryLimit) return Outcome::blocked;
      SendWr failed = std::move(w);
      q.sq.pop_front();
      fail(q, std::move(failed), rnr ? IBV_WC_RNR_RETRY_EXC_ERR : IBV_WC_RETRY_EXC_ERR);
      return Outcome::done;
    }
    SendWr w2 = std::move(w);
    q.sq.pop_front();
    ++stats.executed;
    if (fail_count > 0 && fail_skip > 0) {
      --fail_skip;
    } else if (fail_count > 0) {
      --fail_count;
      fail(q, std::move(w2), fail_status);
      return Outcome::done;
    }
    std::size_t total = 0;
    for (const ibv_sge& s : w2.sges) total += s.length;
    const int local_need = w2.wr.opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0;
    for (const ibv_sge& s : w2.sges)
      if (local_mr(q, s, local_need) == nullptr) {
        fail(q, std::move(w2), IBV_WC_LOC_PROT_ERR);
        return Outcome::done;
      }
    switch (w2.wr.opcode) {
      case IBV_WR_RDMA_WRITE:
      case IBV_WR_RDMA_READ: {
        const bool write = w2.wr.opcode == IBV_WR_RDMA_WRITE;
        const EmuMr* mr = remote_mr(*peer, w2.wr.wr.rdma.remote_addr, w2.wr.wr.rdma.rkey, total,
                                    write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ);
        if (mr == nullptr) {  // a remote access violation breaks both ends of the connection
          fail(q, std::move(w2), IBV_WC_REM_ACCESS_ERR);
          to_error(*peer);
          return Outcome::done;
        }
        largest_rdma = std::max(largest_rdma, total);
        auto* remote = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(w2.wr.wr.rdma.remote_addr));
        for (const ibv_sge& s : w2.sges) {
          auto* local = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(s.addr));
          if (s.length != 0) write ? std::memmove(remote, local, s.length) : std::memmove(local, remote, s.length);
          remote += s.length;
        }
        break;
      }
      case IBV_WR_SEND:
      case IBV_WR_SEND_WITH_IMM: {
        RecvWr r = std::move(peer->rq.front());
        peer->rq.pop_front();
        std::size_t room = 0;
        for (const ibv_sge& s : r.sges) room += s.length;
        Cqe c;
        c.wc.wr_id = r.wr_id;
        c.wc.opcode = IBV_WC_RECV;
        c.wc.qp_num = peer->qp_num;
        if (total > room) {
          c.wc.status = IBV_WC_LOC_LEN_ERR;
          push(peer->rcq, c);
          to_error(*peer);
          fail(q, std::move(w2), IBV_WC_REM_INV_REQ_ERR);
          return Outcome::done;
        }
        // Gather the sender's elements into the receiver's, in order.
        std::size_t ri = 0, roff = 0;
        for (const ibv_sge& s : w2.sges) {
          auto* src = reinterpret_cast<const std::byte*>(static_cast<std::uintptr_t>(s.addr));
          std::size_t left = s.length;
          while (left != 0) {
            const ibv_sge& d = r.sges[ri];
            const std::size_t n = std::min<std::size_t>(left, d.length - roff);
            std::memcpy(reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(d.addr)) + roff, src, n);
            src += n, left -= n, roff += n;
            if (roff == d.length) ++ri, roff = 0;
          }
        }
        c.wc.status = IBV_WC_SUCCESS;
        c.wc.byte_len = static_cast<std::uint32_t>(total);
        if (w2.wr.opcode == IBV_WR_SEND_WITH_IMM) {
          c.wc.wc_flags = IBV_WC_WITH_IMM;
          c.wc.imm_data = w2.wr.imm_data;
        }
        push(peer->rcq, c);
        break;
      }
      default: fail(q, std::move(w2), IBV_WC_REM_INV_REQ_ERR); return Outcome::done;
    }
    complete_send(q, w2, IBV_WC_SUCCESS);
    return Outcome::done;
  }
};

namespace {
// Linked in (an object library, so this runs), the fabric answers the sessions that ask for it.
[[maybe_unused]] const bool g_registered =
    (register_emulated_verbs([]() -> std::shared_ptr<VerbsApi> { return EmulatedFabric::shared(); }), true);
}  // namespace

std::shared_ptr<EmulatedFabric> EmulatedFabric::shared() {
  static std::mutex m;
  static std::weak_ptr<EmulatedFabric> current;
  std::lock_guard lock(m);
  auto f = current.lock();
  if (!f) current = f = std::make_shared<EmulatedFabric>();
  return f;
}

EmulatedFabric::EmulatedFabric() : s_(std::make_unique<State>()), nic_([this] { run_nic(); }) {}

EmulatedFabric::~EmulatedFabric() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  nic_.join();
}

void EmulatedFabric::run_nic() {
  std::unique_lock lock(m_);
  while (!stop_) {
    const auto now = Clock::now();
    auto next = Clock::time_point::max();
    bool worked = false;  // work on one QP may unblock another scanned earlier: scan again
    for (auto& [qpn, q] : s_->qps) {
      while (q->state == IBV_QPS_RTS && !q->sq.empty()) {
        SendWr& w = q->sq.front();
        if (w.due > now) {
          next = std::min(next, w.due);
          break;
        }
        if (s_->execute(*q, now) == State::Outcome::blocked) {
          next = std::min(next, q->sq.front().blocked_since + kRetryLimit);
          break;
        }
        worked = true;
      }
    }
    if (worked) continue;
    if (next == Clock::time_point::max()) cv_.wait(lock);
    else cv_.wait_until(lock, next);
  }
}

void EmulatedFabric::fail_next(ibv_wc_status status, int count, int skip) {
  std::lock_guard lock(m_);
  s_->fail_status = status;
  s_->fail_count = count;
  s_->fail_skip = skip;
}

std::size_t EmulatedFabric::take_largest_rdma() {
  std::lock_guard lock(m_);
  return std::exchange(s_->largest_rdma, 0);
}

void EmulatedFabric::set_delay(std::chrono::milliseconds delay) {
  std::lock_guard lock(m_);
  s_->delay = delay;
}

void EmulatedFabric::break_all_qps() {
  {
    std::lock_guard lock(m_);
    for (auto& [qpn, q] : s_->qps) s_->to_error(*q);
  }
  cv_.notify_all();
}

void EmulatedFabric::reset_faults() {
  std::lock_guard lock(m_);
  s_->fail_count = 0;
  s_->fail_skip = 0;
  s_->delay = std::chrono::milliseconds{0};
}

EmulatedFabric::Stats EmulatedFabric::stats() const {
  std::lock_guard lock(m_);
  Stats st = s_->stats;
  st.qps = s_->qps.size();
  return st;
}

std::vector<std::string> EmulatedFabric::devices() { return {kDeviceName}; }

ibv_context* EmulatedFabric::open_device(const std::string& name) {
  if (name != kDeviceName) {
    errno = ENODEV;
    return nullptr;
  }
  return new EmuContext();
}

int EmulatedFabric::close_device(ibv_context* context) {
  delete static_cast<EmuContext*>(context);
  return 0;
}

int EmulatedFabric::query_port(ibv_context*, std::uint8_t port, ibv_port_attr& attr) {
  if (port != 1) return EINVAL;
  attr = ibv_port_attr{};
  attr.state = IBV_PORT_ACTIVE;
  attr.max_mtu = IBV_MTU_4096;
  attr.active_mtu = IBV_MTU_4096;
  attr.lid = 1;
  attr.link_layer = IBV_LINK_LAYER_INFINIBAND;
  attr.gid_tbl_len = 1;
  return 0;
}

int EmulatedFabric::query_gid(ibv_context*, std::uint8_t port, int index, ibv_gid& gid) {
  if (port != 1 || index != 0) return EINVAL;
  gid = ibv_gid{};
  return 0;
}

ibv_pd* EmulatedFabric::alloc_pd(ibv_context* context) {
  std::lock_guard lock(m_);
  auto* pd = new EmuPd();
  pd->context = context;
  s_->pd_users[pd] = 0;
  return pd;
}

int EmulatedFabric::dealloc_pd(ibv_pd* pd) {
  std::lock_guard lock(m_);
  auto it = s_->pd_users.find(pd);
  if (it == s_->pd_users.end()) return EINVAL;
  if (it->second != 0) return EBUSY;  // MRs or QPs still use it
  s_->pd_users.erase(it);
  delete static_cast<EmuPd*>(pd);
  return 0;
}

ibv_mr* EmulatedFabric::reg_mr(ibv_pd* pd, void* addr, std::size_t length, int access) {
  std::lock_guard lock(m_);
  auto* mr = new EmuMr();
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = addr;
  mr->length = length;
  mr->lkey = s_->next_key++;
  mr->rkey = s_->next_key++;
  mr->access = access;
  s_->mrs_by_lkey[mr->lkey] = mr;
  s_->mrs_by_rkey[mr->rkey] = mr;
  ++s_->pd_users[pd];
  return mr;
}

int EmulatedFabric::dereg_mr(ibv_mr* mr) {
  std::lock_guard lock(m_);
  s_->mrs_by_lkey.erase(mr->lkey);
  s_->mrs_by_rkey.erase(mr->rkey);
  --s_->pd_users[mr->pd];
  delete static_cast<EmuMr*>(mr);
  return 0;
}

ibv_comp_channel* EmulatedFabric::create_comp_channel(ibv_context* context) {
  const int fd = ::eventfd(0, EFD_CLOEXEC);
  if (fd < 0) return nullptr;
  auto* ch = new EmuChannel();
  ch->context = context;
  ch->fd = fd;
  return ch;
}

int EmulatedFabric::destroy_comp_channel(ibv_comp_channel* channel) {
  std::lock_guard lock(m_);
  for (EmuCq* cq : s_->cqs)
    if (cq->ch == channel) return EBUSY;
  ::close(channel->fd);
  delete static_cast<EmuChannel*>(channel);
  return 0;
}

ibv_cq* EmulatedFabric::create_cq(ibv_context* context, int cqe, ibv_comp_channel* channel) {
  if (cqe <= 0) {
    errno = EINVAL;
    return nullptr;
  }
  std::lock_guard lock(m_);
  auto* cq = new EmuCq();
  cq->context = context;
  cq->channel = channel;
  cq->ch = static_cast<EmuChannel*>(channel);
  cq->cqe = cqe;
  cq->capacity = static_cast<std::size_t>(cqe);
  s_->cqs.insert(cq);
  return cq;
}

int EmulatedFabric::destroy_cq(ibv_cq* cq) {
  std::lock_guard lock(m_);
  auto* c = static_cast<EmuCq*>(cq);
  // rdma-core blocks here forever; the emulation says so instead.
  if (c->taken != c->acked) return EBUSY;
  for (auto& [qpn, q] : s_->qps)
    if (q->scq == c || q->rcq == c) return EBUSY;
  if (c->ch != nullptr) std::erase(c->ch->events, c);
  s_->cqs.erase(c);
  delete c;
  return 0;
}

int EmulatedFabric::req_notify_cq(ibv_cq* cq, int) {
  std::lock_guard lock(m_);
  static_cast<EmuCq*>(cq)->armed = true;
  return 0;
}

int EmulatedFabric::get_cq_event(ibv_comp_channel* channel, ibv_cq** cq) {
  std::lock_guard lock(m_);
  auto* ch = static_cast<EmuChannel*>(channel);
  if (ch->events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  EmuCq* c = ch->events.front();
  ch->events.pop_front();
  ++c->taken;
  *cq = c;
  if (ch->events.empty()) {  // no event left: the fd stops being readable
    std::uint64_t n = 0;
    [[maybe_unused]] const ssize_t r = ::read(ch->fd, &n, sizeof n);
  }
  return 0;
}

void EmulatedFabric::ack_cq_events(ibv_cq* cq, unsigned int n) {
  std::lock_guard lock(m_);
  static_cast<EmuCq*>(cq)->acked += n;
}

int EmulatedFabric::poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  std::lock_guard lock(m_);
  auto* c = static_cast<EmuCq*>(cq);
  if (c->overflowed) return -EOVERFLOW;
  int got = 0;
  while (got < n && !c->cqes.empty()) {
    const Cqe& e = c->cqes.front();
    if (e.qpn != 0)
      if (auto it = s_->qps.find(e.qpn); it != s_->qps.end())
        it->second->retired = std::max(it->second->retired, e.seq);
    wc[got++] = e.wc;
    c->cqes.pop_front();
  }
  if (got != 0) cv_.notify_all();
  return got;
}

ibv_qp* EmulatedFabric::create_qp(ibv_pd* pd, ibv_qp_init_attr& attr) {
  if (attr.qp_type != IBV_QPT_RC || attr.send_cq == nullptr || attr.recv_cq == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  std::lock_guard lock(m_);
  auto* q = new EmuQp();
  q->context = pd->context;
  q->pd = pd;
  q->send_cq = attr.send_cq;
  q->recv_cq = attr.recv_cq;
  q->scq = static_cast<EmuCq*>(attr.send_cq);
  q->rcq = static_cast<EmuCq*>(attr.recv_cq);
  q->qp_type = IBV_QPT_RC;
  q->state = IBV_QPS_RESET;
  q->qp_num = s_->next_qpn++;
  q->max_send = attr.cap.max_send_wr;
  q->max_recv = attr.cap.max_recv_wr;
  s_->qps[q->qp_num] = q;
  ++s_->pd_users[pd];
  return q;
}

int EmulatedFabric::modify_qp(ibv_qp* qp, ibv_qp_attr& attr, int mask) {
  {
    std::lock_guard lock(m_);
    auto* q = static_cast<EmuQp*>(qp);
    if ((mask & IBV_QP_STATE) == 0) return EINVAL;
    const ibv_qp_state to = attr.qp_state;
    const ibv_qp_state from = q->state;
    const bool ok = to == IBV_QPS_ERR || to == IBV_QPS_RESET || (from == IBV_QPS_RESET && to == IBV_QPS_INIT) ||
                    (from == IBV_QPS_INIT && to == IBV_QPS_RTR && (mask & IBV_QP_DEST_QPN) != 0) ||
                    (from == IBV_QPS_RTR && to == IBV_QPS_RTS);
    if (!ok) return EINVAL;
    if (to == IBV_QPS_ERR) {
      s_->to_error(*q);
    } else {
      if (to == IBV_QPS_RTR) q->remote_qpn = attr.dest_qp_num;
      if (to == IBV_QPS_RESET) q->sq.clear(), q->rq.clear();
      q->state = to;
    }
  }
  cv_.notify_all();
  return 0;
}

int EmulatedFabric::destroy_qp(ibv_qp* qp) {
  {
    std::lock_guard lock(m_);
    auto* q = static_cast<EmuQp*>(qp);
    s_->qps.erase(q->qp_num);
    --s_->pd_users[q->pd];
    delete q;  // work requests still queued vanish without completions, as on hardware
  }
  cv_.notify_all();
  return 0;
}

int EmulatedFabric::post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  {
    std::lock_guard lock(m_);
    auto* q = static_cast<EmuQp*>(qp);
    for (; wr != nullptr; wr = wr->next) {
      if (q->state != IBV_QPS_RTS && q->state != IBV_QPS_ERR) return *bad = wr, EINVAL;
      if (q->posted - q->retired >= q->max_send) {
        ++s_->stats.sq_overflows;
        return *bad = wr, ENOMEM;
      }
      SendWr w;
      w.wr = *wr;
      w.wr.next = nullptr;
      w.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
      w.wr.sg_list = nullptr;
      w.seq = ++q->posted;
      w.due = Clock::now() + s_->delay;
      if (q->state == IBV_QPS_ERR) {
        s_->fail(*q, std::move(w), IBV_WC_WR_FLUSH_ERR);
        continue;
      }
      q->sq.push_back(std::move(w));
    }
  }
  cv_.notify_all();
  return 0;
}

int EmulatedFabric::post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  {
    std::lock_guard lock(m_);
    auto* q = static_cast<EmuQp*>(qp);
    for (; wr != nullptr; wr = wr->next) {
      if (q->state == IBV_QPS_RESET || q->rq.size() >= q->max_recv)
        return *bad = wr, q->state == IBV_QPS_RESET ? EINVAL : ENOMEM;
      RecvWr r{wr->wr_id, std::vector<ibv_sge>(wr->sg_list, wr->sg_list + wr->num_sge)};
      if (q->state == IBV_QPS_ERR) {
        Cqe c;
        c.wc.wr_id = r.wr_id;
        c.wc.status = IBV_WC_WR_FLUSH_ERR;
        c.wc.opcode = IBV_WC_RECV;
        c.wc.qp_num = q->qp_num;
        s_->push(q->rcq, c);
        continue;
      }
      q->rq.push_back(std::move(r));
    }
  }
  cv_.notify_all();
  return 0;
}

}  // namespace hmc::detail
