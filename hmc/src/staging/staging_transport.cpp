#include "staging/staging_transport.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "peer_log.hpp"

namespace hmc::detail {

using runtime::log;

namespace {

constexpr std::uint64_t kStagedRegionBit = std::uint64_t{1} << 62;  // ids of regions staged here
constexpr std::size_t kMaxServing = 4096;  // stage requests one peer may have copying here at once

// The mirror of a staged session buffer: pinned host memory from the device's copier.
class PinnedHostMemory final : public Memory {
 public:
  explicit PinnedHostMemory(std::shared_ptr<DeviceCopier> copier)
      : Memory(copier->device_id()), copier_(std::move(copier)) {}
  MemoryType type() const noexcept override { return MemoryType::CPU; }
  void* allocate(std::size_t size) override { return copier_->allocate_pinned(size); }
  void free(void* ptr, std::size_t size) noexcept override { copier_->free_pinned(ptr, size); }
  void copy_host_to_device(void* dst, const void* src, std::size_t n) const override { std::memcpy(dst, src, n); }
  void copy_device_to_host(void* dst, const void* src, std::size_t n) const override { std::memcpy(dst, src, n); }
  void copy_device_to_device(void* dst, const void* src, std::size_t n) const override { std::memmove(dst, src, n); }

 private:
  std::shared_ptr<DeviceCopier> copier_;
};

std::uint32_t status_of(error_code ec) {
  if (!ec) return 0;
  return ec.category() == hmc_category() ? static_cast<std::uint32_t>(ec.value())
                                         : static_cast<std::uint32_t>(Status::ERROR);
}

error_code from_status(std::uint32_t s) {
  if (s == 0) return {};
  return make_error_code(s <= static_cast<std::uint32_t>(Status::AUTH_FAILED) ? static_cast<Status>(s) : Status::ERROR);
}

}  // namespace

// One device type in use here: its copier (a stream and its completion fd) and bounce slots.
struct StagingTransport::Device {
  std::shared_ptr<DeviceCopier> copier;
  std::unique_ptr<runtime::asio::posix::stream_descriptor> fd;
  std::unique_ptr<BouncePool> pool;
  std::uint64_t pool_region = 0;      // the pool as the inner transport's registered memory
  std::deque<std::uint64_t> waiting;  // operations waiting for a free slot, FIFO
};

// A staged operation: stage-out requests (get from a staged peer), then the move (pieces through
// bounce slots, or the inner transport directly), then stage-in requests (put to a staged peer).
struct StagingTransport::Op {
  // Constructed in place: any_completion_handler's move assignment recurses in Boost 1.81.
  explicit Op(Completion d) : done(std::move(d)) {}

  std::uint64_t id = 0;
  OpRequest request;  // its segments point into `segments` (a request only borrows them)
  std::vector<Segment> segments;
  std::vector<std::byte> notify;  // put-with-notify: the message sent once the bytes are in place
  Completion done;
  Device* device = nullptr;  // local memory staged through this device's slots; null: moved directly
  std::byte* local_base = nullptr;
  bool remote_staged = false;
  std::size_t segment = 0;  // the next piece: segments[segment] from byte `cursor`
  std::size_t cursor = 0;
  std::size_t window = 0;
  std::size_t active = 0;   // pieces (or the whole inner operation) in copies or the inner transport
  std::size_t answers = 0;  // stage requests not answered yet
  bool moving = false;
  bool queued = false;    // in device->waiting
  bool finished = false;  // the caller was told
  std::unique_ptr<runtime::asio::steady_timer> deadline;
};

StagingTransport::StagingTransport(runtime::EventLoop& loop, ConnBuffer& buffer, StagingOptions options,
                                   const MakeInner& make_inner)
    : loop_(loop), buffer_(buffer), options_(std::move(options)) {
  const MemoryType type = buffer.type();
  const bool native = std::find(options_.native.begin(), options_.native.end(), type) != options_.native.end();
  if (is_device_memory(type) && !native) {
    buffer_device_ = &device_for(type, buffer.device_id());
    mirror_ = std::make_unique<ConnBuffer>(std::make_shared<PinnedHostMemory>(buffer_device_->copier), buffer.size());
    log().info("session buffer of {} bytes is {} memory the transport cannot move: staged through a pinned host "
               "mirror and {} bounce slots of {} bytes",
               buffer.size(), to_string(type), options_.bounce_bytes / std::max<std::size_t>(1, options_.chunk),
               options_.chunk);
  }
  inner_ = make_inner(mirror_ ? *mirror_ : buffer);
  inner_->on_peer_failed = [this](std::uint32_t rank, error_code reason) {
    fail_rank(rank, reason);
    staged_peers_.erase(rank);
    if (on_peer_failed) on_peer_failed(rank, reason);
  };
  inner_->on_peer_ready = [this](std::uint32_t rank) {
    if (on_peer_ready) on_peer_ready(rank);
  };
  inner_->on_message = [this](std::uint32_t rank, std::span<const std::byte> bytes) {
    if (!is_stage_message(bytes)) {
      if (on_message) on_message(rank, bytes);
      return;
    }
    const std::optional<StageMessage> m = decode_stage_message(bytes);
    if (!m) {
      log().error("rank {} sent a malformed staging message; disconnecting it{}", rank,
                  peer_fields(rank, "staging", Status::PROTOCOL_ERROR));
      remove_peer(rank, make_error_code(Status::PROTOCOL_ERROR));
      if (on_peer_failed) on_peer_failed(rank, make_error_code(Status::PROTOCOL_ERROR));
      return;
    }
    if (m->kind == StageKind::answer) answered(rank, *m);
    else serve(rank, *m);
  };
  if (buffer_device_ != nullptr) pool_of(*buffer_device_);  // allocation failures show at construction
}

StagingTransport::~StagingTransport() {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, op] : ops_) ids.push_back(id);
  for (std::uint64_t id : ids)
    if (Op* op = find_op(id)) finish(*op, make_error_code(Status::CLOSED));
  life_.reset();   // completions still reported by the inner transport find nothing to do
  inner_.reset();  // closes endpoints: no more RMA into the mirror or the bounce slots
  for (auto& [key, d] : devices_) {
    if (d->fd) {
      d->fd->cancel();
      d->fd->release();  // the copier owns its fd
    }
  }
  for (auto& [key, d] : devices_) d->copier->synchronize();  // copies still running touch what is freed below
  ops_.clear();
  for (auto& [key, d] : devices_) d->pool.reset();
  mirror_.reset();
}

StagingTransport::Device& StagingTransport::device_for(MemoryType type, int device_id) {
  auto& slot = devices_[{type, device_id}];
  if (!slot) {
    auto d = std::make_unique<Device>();
    d->copier = open_device_copier(type, device_id);
    slot = std::move(d);
    watch(*slot);
  }
  return *slot;
}

BouncePool& StagingTransport::pool_of(Device& d) {
  if (!d.pool) {
    d.pool = std::make_unique<BouncePool>(d.copier, options_.bounce_bytes, options_.chunk);
    d.pool_region = inner_->register_region(d.pool->base(), d.pool->size(), MemoryType::CPU);
  }
  return *d.pool;
}

void StagingTransport::watch(Device& d) {
  if (!d.fd) d.fd = std::make_unique<runtime::asio::posix::stream_descriptor>(loop_.executor(), d.copier->fd());
  d.fd->async_wait(runtime::asio::posix::stream_descriptor::wait_read,
                   [this, life = std::weak_ptr<int>(life_), dev = &d](error_code ec) {
                     if (ec || !life.lock()) return;
                     drain(*dev);
                     if (life.lock()) watch(*dev);
                   });
}

void StagingTransport::drain(Device& d) {
  std::vector<DeviceCopier::Done> done;
  d.copier->drain(done);
  for (const auto& [id, ec] : done) {
    auto it = copies_.find(id);
    if (it == copies_.end()) continue;
    CopyDone next = std::move(it->second);
    copies_.erase(it);
    next(ec);
  }
}

error_code StagingTransport::start_copy(Device& d, DeviceCopier::Direction dir, void* dst, const void* src,
                                        std::size_t n, CopyDone done) {
  const std::uint64_t id = next_copy_++;
  copies_.emplace(id, std::move(done));
  const error_code ec = d.copier->start(dir, dst, src, n, id);
  if (ec) return copies_.erase(id), ec;
  ++staged_.copies;
  staged_.bytes += n;
  return ec;
}

void StagingTransport::attach() { inner_->attach(); }

std::vector<std::byte> StagingTransport::local_info(std::uint32_t to, const LocalAddress& self) {
  std::vector<std::byte> info = inner_->local_info(to, self);
  if (!mirror_) return info;  // unchanged: peers without staging read it as before
  return add_staging_prefix(info, static_cast<std::uint32_t>(buffer_.type()));
}

std::string StagingTransport::add_peer(std::uint32_t rank, std::span<const std::byte> info) {
  const bool staged = has_staging_prefix(info);
  std::string why = inner_->add_peer(rank, strip_staging_prefix(info));
  if (why.empty() && staged) {
    staged_peers_.insert(rank);
    log().info("rank {}'s buffer is device memory staged through its host mirror", rank);
  }
  return why;
}

void StagingTransport::remove_peer(std::uint32_t rank, error_code reason) {
  fail_rank(rank, reason);
  staged_peers_.erase(rank);
  inner_->remove_peer(rank, reason);
}

std::string StagingTransport::carriers(std::uint32_t rank) const {
  std::string c = inner_->carriers(rank);
  return mirror_ || staged_peers_.count(rank) != 0 ? c + " (staged)" : c;
}

std::uint64_t StagingTransport::register_region(void* base, std::size_t size, MemoryType type) {
  const bool native = std::find(options_.native.begin(), options_.native.end(), type) != options_.native.end();
  if (!is_device_memory(type) || native) {
    const std::uint64_t id = inner_->register_region(base, size, type);
    if ((id & kStagedRegionBit) != 0) throw Error(Status::ERROR, "transport region ids collide with staging's");
    return id;
  }
  Device& d = device_for(type, buffer_.device_id());
  pool_of(d);
  const std::uint64_t id = kStagedRegionBit | next_region_++;
  regions_[id] = StagedRegion{static_cast<std::byte*>(base), size, &d, 0, false};
  log().debug("registered {} bytes of {} memory for staging (region {:#x})", size, to_string(type), id);
  return id;
}

void StagingTransport::unregister_region(std::uint64_t id) {
  auto it = regions_.find(id);
  if (it == regions_.end()) return inner_->unregister_region(id);
  if (it->second.users == 0) regions_.erase(it);
  else it->second.unregistered = true;
}

std::size_t StagingTransport::region_size(std::uint64_t id) const {
  if ((id & kStagedRegionBit) == 0 || id == UINT64_MAX) return inner_->region_size(id);
  auto it = regions_.find(id);
  return it == regions_.end() || it->second.unregistered ? 0 : it->second.size;
}

void StagingTransport::submit(OpRequest request, Completion done) {
  const bool local_staged = (request.region == 0 && mirror_) || regions_.count(request.region) != 0;
  const bool remote_staged = staged_peers_.count(request.rank) != 0;
  if (request.kind == OpKind::message || request.kind == OpKind::flush || (!local_staged && !remote_staged))
    return inner_->submit(std::move(request), std::move(done));
  auto op = std::make_unique<Op>(std::move(done));
  op->id = next_op_++;
  op->remote_staged = remote_staged;
  if (local_staged) {
    if (request.region == 0) {
      op->device = buffer_device_;
      op->local_base = static_cast<std::byte*>(buffer_.data());
    } else {
      StagedRegion& r = regions_.at(request.region);
      ++r.users;
      op->device = r.device;
      op->local_base = r.base;
    }
  }
  op->segments.assign(request.segments.begin(), request.segments.end());
  if (request.kind == OpKind::put_notify) {  // a staged put, then its message (succeed)
    op->notify.assign(request.message.begin(), request.message.end());
    request.kind = OpKind::put;
    request.message = {};
  }
  op->request = request;
  op->request.segments = op->segments;
  op->deadline = std::make_unique<runtime::asio::steady_timer>(loop_.executor());
  op->deadline->expires_after(options_.timeout);
  op->deadline->async_wait([this, life = std::weak_ptr<int>(life_), id = op->id](error_code ec) {
    if (ec || !life.lock()) return;
    if (Op* o = find_op(id); o != nullptr && !o->finished) finish(*o, make_error_code(Status::TIMEOUT)), maybe_free(*o);
  });
  Op& ref = *op;
  ops_[ref.id] = std::move(op);
  start(ref);
  maybe_free(ref);  // a piece that could not start may have ended it already
}

StagingTransport::Op* StagingTransport::find_op(std::uint64_t id) {
  auto it = ops_.find(id);
  return it == ops_.end() ? nullptr : it->second.get();
}

void StagingTransport::start(Op& op) {
  if (op.request.kind == OpKind::get && op.remote_staged) return send_requests(op, StageKind::stage_out);
  begin_move(op);
}

void StagingTransport::begin_move(Op& op) {
  op.moving = true;
  if (op.device == nullptr) {  // local memory the inner transport moves: one operation, as requested
    OpRequest r = op.request;
    ++op.active;
    return inner_->submit(std::move(r), [this, life = std::weak_ptr<int>(life_), id = op.id](error_code ec) {
      if (!life.lock()) return;
      Op* o = find_op(id);
      if (o == nullptr) return;
      --o->active;
      if (ec) return finish(*o, ec), maybe_free(*o);
      if (!o->finished) after_move(*o);
      maybe_free(*o);
    });
  }
  BouncePool& pool = pool_of(*op.device);
  op.window = op.request.chunk != 0 ? std::min(op.request.window, pool.slots()) : pool.slots();
  pump(op);
}

// Starts pieces while the window and the bounce slots allow.
void StagingTransport::pump(Op& op) {
  Device& d = *op.device;
  BouncePool& pool = *d.pool;
  const std::size_t piece_max = op.request.chunk != 0 ? std::min(op.request.chunk, pool.chunk()) : pool.chunk();
  const bool is_put = op.request.kind == OpKind::put;
  while (!op.finished && op.segment < op.request.segments.size() && op.active < op.window) {
    const std::optional<std::size_t> slot = pool.acquire();
    if (!slot) {
      if (!op.queued) d.waiting.push_back(op.id), op.queued = true;
      return;
    }
    const Segment& s = op.request.segments[op.segment];
    const std::size_t n = std::min(piece_max, s.size - op.cursor);
    const Segment piece{*slot, s.remote_offset + op.cursor, n};
    std::byte* device_at = op.local_base + s.local_offset + op.cursor;
    std::byte* host_at = pool.base() + *slot;
    op.cursor += n;
    if (op.cursor == s.size) ++op.segment, op.cursor = 0;
    ++op.active;
    auto rma = [this, life = std::weak_ptr<int>(life_), id = op.id, slot = *slot, piece, is_put, device_at, host_at,
                &d](error_code ec) {
      if (!life.lock()) return;
      Op* o = find_op(id);
      if (o == nullptr) return;
      if (ec || o->finished) return piece_done(*o, slot, ec);
      OpRequest r;
      r.rank = o->request.rank;
      r.kind = is_put ? OpKind::put : OpKind::get;
      r.region = d.pool_region;
      r.segments = std::span<const Segment>(&piece, 1);
      inner_->submit(std::move(r),
                     [this, life, id, slot, is_put, device_at, host_at, n = piece.size, &d](error_code ec2) {
                       if (!life.lock()) return;
                       Op* o2 = find_op(id);
                       if (o2 == nullptr) return;
                       if (ec2 || is_put || o2->finished) return piece_done(*o2, slot, ec2);
                       // get: the bytes are in the slot; now slot -> device.
                       const error_code ec3 = start_copy(d, DeviceCopier::Direction::to_device, device_at, host_at, n,
                                                         [this, life, id, slot](error_code ec4) {
                                                           if (!life.lock()) return;
                                                           if (Op* o3 = find_op(id)) piece_done(*o3, slot, ec4);
                                                         });
                       if (ec3) piece_done(*o2, slot, ec3);
                     });
    };
    if (is_put) {  // device -> slot, then RMA from the slot
      if (error_code ec = start_copy(d, DeviceCopier::Direction::to_host, host_at, device_at, n, rma)) {
        pool.release(*slot);  // not piece_done: the caller frees the record once we returned
        --op.active;
        return finish(op, ec);
      }
    } else {
      rma({});
    }
  }
}

void StagingTransport::piece_done(Op& op, std::size_t slot, error_code ec) {
  Device& d = *op.device;
  d.pool->release(slot);
  --op.active;
  if (ec) finish(op, ec);
  if (!op.finished) {
    if (op.segment == op.request.segments.size() && op.active == 0) after_move(op);
    else pump(op);
  }
  maybe_free(op);
  wake_waiters(d);
}

void StagingTransport::wake_waiters(Device& d) {
  while (!d.waiting.empty() && d.pool->slots() != 0) {
    Op* op = find_op(d.waiting.front());
    d.waiting.pop_front();
    if (op == nullptr) continue;
    op->queued = false;
    if (op->finished) continue;
    pump(*op);
    const bool queued_again = op->queued;  // it took what was free and waits again
    maybe_free(*op);
    if (queued_again) return;
  }
}

void StagingTransport::after_move(Op& op) {
  op.moving = false;
  if (op.request.kind == OpKind::put && op.remote_staged) return send_requests(op, StageKind::stage_in);
  succeed(op);
}

// The bytes are where they belong; a put-with-notify sends its message only now, so the peer never
// sees it before them.
void StagingTransport::succeed(Op& op) {
  if (op.notify.empty()) return finish(op, {});
  OpRequest r;
  r.rank = op.request.rank;
  r.kind = OpKind::message;
  r.message = op.notify;
  ++op.active;
  inner_->submit(std::move(r), [this, life = std::weak_ptr<int>(life_), id = op.id](error_code ec) {
    if (!life.lock()) return;
    Op* o = find_op(id);
    if (o == nullptr) return;
    --o->active;
    finish(*o, ec);
    maybe_free(*o);
  });
}

void StagingTransport::send_requests(Op& op, StageKind kind) {
  for (const Segment& s : op.request.segments) {
    const std::uint64_t rid = next_request_++;
    requests_[rid] = {op.request.rank, op.id};
    ++op.answers;
    const std::vector<std::byte> bytes = encode_stage_message(StageMessage{kind, rid, s.remote_offset, s.size, 0});
    OpRequest r;
    r.rank = op.request.rank;
    r.kind = OpKind::message;
    r.message = bytes;
    inner_->submit(std::move(r), [this, life = std::weak_ptr<int>(life_), rank = op.request.rank, rid](error_code ec) {
      if (ec && life.lock()) answered(rank, StageMessage{StageKind::answer, rid, 0, 0, status_of(ec)});
    });
  }
}

void StagingTransport::answered(std::uint32_t rank, const StageMessage& m) {
  auto it = requests_.find(m.id);
  if (it == requests_.end() || it->second.first != rank) return;  // late (the op ended), or not this peer's
  const std::uint64_t op_id = it->second.second;
  requests_.erase(it);
  Op* op = find_op(op_id);
  if (op == nullptr || op->finished) return;
  if (m.status != 0) return finish(*op, from_status(m.status)), maybe_free(*op);
  if (--op->answers != 0) return;
  if (op->moving || op->request.kind == OpKind::put) succeed(*op);
  else begin_move(*op);
  maybe_free(*op);
}

// A peer's stage request against our staged buffer: every byte of it is checked first.
void StagingTransport::serve(std::uint32_t rank, const StageMessage& m) {
  StageMessage answer{StageKind::answer, m.id, 0, 0, 0};
  if (!mirror_) {
    answer.status = static_cast<std::uint32_t>(Status::PROTOCOL_ERROR);
  } else if (m.size == 0 || m.offset > buffer_.size() || m.size > buffer_.size() - m.offset) {
    answer.status = static_cast<std::uint32_t>(Status::OUT_OF_RANGE);
  } else if (serving_[rank] >= kMaxServing) {
    answer.status = static_cast<std::uint32_t>(Status::ERROR);
    log().warn("rank {} has over {} stage requests in progress here; refusing more{}", rank, kMaxServing,
               peer_fields(rank, "staging", Status::ERROR));
  } else {
    std::byte* device = static_cast<std::byte*>(buffer_.data()) + m.offset;
    std::byte* host = static_cast<std::byte*>(mirror_->data()) + m.offset;
    const bool in = m.kind == StageKind::stage_in;
    ++serving_[rank];
    const error_code ec =
        start_copy(*buffer_device_, in ? DeviceCopier::Direction::to_device : DeviceCopier::Direction::to_host,
                   in ? static_cast<void*>(device) : host, in ? static_cast<const void*>(host) : device, m.size,
                   [this, rank, answer](error_code copied) mutable {
                     if (--serving_[rank] == 0) serving_.erase(rank);
                     answer.status = status_of(copied);
                     send(rank, answer);
                   });
    if (!ec) return;
    if (--serving_[rank] == 0) serving_.erase(rank);
    answer.status = status_of(ec);
  }
  send(rank, answer);
}

void StagingTransport::send(std::uint32_t rank, const StageMessage& m) {
  if (inner_->peer(rank) == nullptr) return;  // gone meanwhile: nobody waits for the answer
  const std::vector<std::byte> bytes = encode_stage_message(m);
  OpRequest r;
  r.rank = rank;
  r.kind = OpKind::message;
  r.message = bytes;
  inner_->submit(std::move(r), [rank](error_code ec) {
    if (ec) log().debug("staging answer to rank {} not sent: {}", rank, ec.message());
  });
}

void StagingTransport::finish(Op& op, error_code ec) {
  if (op.finished) return;
  op.finished = true;
  op.deadline->cancel();
  for (auto it = requests_.begin(); it != requests_.end();)
    it = it->second.second == op.id ? requests_.erase(it) : std::next(it);
  runtime::asio::post(loop_.executor(), runtime::asio::append(std::move(op.done), ec));
}

// The record goes once the caller was told and no copy or inner operation uses its memory.
void StagingTransport::maybe_free(Op& op) {
  if (!op.finished || op.active != 0) return;
  if (op.request.region != 0) {
    auto it = regions_.find(op.request.region);
    if (it != regions_.end() && --it->second.users == 0 && it->second.unregistered) regions_.erase(it);
  }
  ops_.erase(op.id);
}

void StagingTransport::fail_rank(std::uint32_t rank, error_code reason) {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, op] : ops_)
    if (op->request.rank == rank && !op->finished) ids.push_back(id);
  for (std::uint64_t id : ids) {
    Op* op = find_op(id);
    finish(*op, reason);
    maybe_free(*op);
  }
}

}  // namespace hmc::detail
