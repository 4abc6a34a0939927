#include "hmc/world/transfer_engine.hpp"

#include <boost/asio/as_tuple.hpp>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <set>
#include <sstream>

#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/log.hpp"
#include "store/store_handshake.hpp"
#include "store/watch_ended.hpp"
#include "wire/byte_order.hpp"
#include "world/batch.hpp"
#include "world/connector.hpp"

namespace hmc {
namespace detail {

using std::chrono::milliseconds;

namespace {

// A transfer message (CtrlKind::bytes, 40 bytes, little-endian):
//   magic u32 "HMCT" | kind u8 | status u8 | reserved u16 | id u64 | offset u64 | length u64 | address u64
// offset: in the initiator's session buffer; address: in the target's registered memory.
constexpr std::uint32_t kMagic = 0x54434D48;  // bytes 'H' 'M' 'C' 'T'
constexpr std::size_t kMessageSize = 40;
enum class Kind : std::uint8_t { write = 1, read = 2, ack = 3 };

struct Message {
  Kind kind = Kind::ack;
  Status status = Status::SUCCESS;
  std::uint64_t id = 0, offset = 0, length = 0, address = 0;
};

std::vector<std::byte> encode(const Message& m) {
  std::vector<std::byte> out(kMessageSize);
  store_le32(out.data(), kMagic);
  out[4] = static_cast<std::byte>(m.kind);
  out[5] = static_cast<std::byte>(m.status);
  store_le64(out.data() + 8, m.id);
  store_le64(out.data() + 16, m.offset);
  store_le64(out.data() + 24, m.length);
  store_le64(out.data() + 32, m.address);
  return out;
}

std::optional<Message> decode(std::span<const std::byte> b) {
  if (b.size() != kMessageSize || load_le32(b.data()) != kMagic) return std::nullopt;
  const auto kind = std::to_integer<std::uint8_t>(b[4]);
  const auto status = std::to_integer<std::uint8_t>(b[5]);
  if (kind < 1 || kind > 3 || status > static_cast<std::uint8_t>(Status::AUTH_FAILED)) return std::nullopt;
  return Message{static_cast<Kind>(kind),  static_cast<Status>(status), load_le64(b.data() + 8),
                 load_le64(b.data() + 16), load_le64(b.data() + 24),    load_le64(b.data() + 32)};
}

milliseconds left(time_point deadline) {
  const auto now = std::chrono::steady_clock::now();
  return deadline <= now ? milliseconds(1) : std::max(milliseconds(1), std::chrono::ceil<milliseconds>(deadline - now));
}

}  // namespace

class TransferEngineImpl : public std::enable_shared_from_this<TransferEngineImpl> {
 public:
  TransferEngineImpl(Session& s, Store& st, std::uint32_t r, std::string id, TransferEngineOptions o)
      : session(s), store(st), rank(r), unique_id(std::move(id)), options(std::move(o)), ex(s.executor()) {
    // Staging slots: transfers larger than one slot go in slot-sized pieces, as many in flight as fit.
    slot = std::max<std::size_t>(4096, std::min<std::size_t>(s.buffer().size() / 8, std::size_t{4} << 20));
    for (std::size_t i = 0; i + slot <= s.buffer().size(); i += slot) free_slots.push_back(i);
  }

  void start() {
    std::weak_ptr<TransferEngineImpl> weak = weak_from_this();
    connector = std::make_shared<Connector>(session, &store, rank, "te/", options.timeout, [weak](std::uint32_t peer) {
      if (auto self = weak.lock()) asio::post(self->ex, [self, peer] { self->serve(peer); });
    });
    connector->start();
  }

  // -- the peer's side -----------------------------------------------------------------------------
  void serve(std::uint32_t peer) {
    if (closed || !serving.insert(peer).second) return;
    asio::co_spawn(ex, receive(peer), asio::detached);
  }

  asio::awaitable<void> receive(std::uint32_t peer) {
    auto self = shared_from_this();
    for (;;) {
      auto [e, m] = co_await session.async_ctrl_recv(peer, std::chrono::hours(1), asio::as_tuple(asio::use_awaitable));
      if (closed) co_return;
      if (e) {
        const auto ended = watch_ended(e);
        if (!ended) continue;
        lost(peer, *ended);
        co_return;
      }
      const auto msg = decode(m.bytes());
      if (!msg) {
        runtime::log().error("transfer engine {}: malformed message from rank {}; dropping it", unique_id, peer);
        session.disconnect(peer);
        lost(peer, "it sent a malformed message");
        co_return;
      }
      if (msg->kind == Kind::ack) {
        finish(msg->id, msg->status, "");
      } else {
        handle(peer, *msg);
      }
    }
  }

  // A peer asks to write into (or read from) our memory: only inside a region we registered.
  void handle(std::uint32_t peer, const Message& m) {
    auto reply = [self = shared_from_this(), peer, id = m.id](Status s) {
      Message ack;
      ack.id = id;
      ack.status = s;
      self->session.async_ctrl_send(peer, CtrlMessage::from_bytes(encode(ack)), [](std::exception_ptr) {});
    };
    auto it = regions.upper_bound(m.address);
    if (it == regions.begin() || m.length == 0) return reply(Status::OUT_OF_RANGE);
    --it;
    const std::uint64_t base = it->first;
    const Region& r = it->second;
    if (m.address - base > r.length || m.length > r.length - (m.address - base)) return reply(Status::OUT_OF_RANGE);
    auto done = [reply](std::exception_ptr e) {
      Status s = Status::SUCCESS;
      try {
        if (e) std::rethrow_exception(e);
      } catch (const Error& err) {
        s = err.status();
      } catch (...) {
        s = Status::ERROR;
      }
      reply(s);
    };
    const std::size_t at = static_cast<std::size_t>(m.address - base);
    if (m.kind == Kind::write) {
      session.async_get_into(r.memory, at, peer, m.offset, m.length, done);
    } else {
      session.async_put_from(r.memory, at, peer, m.offset, m.length, done);
    }
  }

  void lost(std::uint32_t peer, const std::string& why) {
    serving.erase(peer);
    std::vector<std::uint64_t> ids;
    for (const auto& [id, p] : pending)
      if (p.peer == peer) ids.push_back(id);
    for (auto id : ids) finish(id, Status::PEER_LOST, why);
  }

  // -- the initiator's side ------------------------------------------------------------------------
  struct Pending {
    std::uint32_t peer = 0;
    std::function<void(Status, const std::string&)> done;
  };

  void finish(std::uint64_t id, Status s, const std::string& why) {
    auto it = pending.find(id);
    if (it == pending.end()) return;  // an ack after the transfer gave up
    auto p = std::move(it->second);
    pending.erase(it);
    p.done(s, why);
  }

  asio::awaitable<std::size_t> acquire_slot(time_point deadline) {
    while (free_slots.empty()) {
      auto t = std::make_shared<asio::steady_timer>(ex, deadline);
      slot_waiters.push_back(t);
      runtime::error_code ignored;
      co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ignored));
      std::erase(slot_waiters, t);
      if (closed) throw Fault{Status::CLOSED, rank, "the engine is closed"};
      if (std::chrono::steady_clock::now() >= deadline && free_slots.empty())
        throw Fault{Status::TIMEOUT, rank, "no staging room within the timeout"};
    }
    const std::size_t s = free_slots.front();
    free_slots.pop_front();
    co_return s;
  }

  void release_slot(std::size_t s) {
    free_slots.push_back(s);
    if (!slot_waiters.empty()) slot_waiters.front()->cancel();
  }

  asio::awaitable<std::uint32_t> resolve(const std::string& peer_id, time_point deadline) {
    if (auto it = ranks.find(peer_id); it != ranks.end()) co_return it->second;
    if (peer_id.empty() || peer_id.find('/') != std::string::npos)
      throw Fault{Status::INVALID_ARGUMENT, rank, "'" + peer_id + "' is not an engine id"};
    std::string key = "te/id/" + peer_id;
    auto [e, text] = co_await store.async_get(std::move(key), left(deadline), asio::as_tuple(asio::use_awaitable));
    if (e) throw Fault{Status::NOT_FOUND, rank, "no engine '" + peer_id + "' joined the store"};
    const unsigned long r = std::strtoul(text.c_str(), nullptr, 10);
    ranks[peer_id] = static_cast<std::uint32_t>(r);
    co_return static_cast<std::uint32_t>(r);
  }

  // (Reference parameters: GCC 12 may destroy some coroutine argument temporaries twice.)
  asio::awaitable<void> transfer(bool is_write, const std::string& peer_id, const std::vector<TransferPiece>& pieces) {
    auto self = shared_from_this();
    const time_point deadline = runtime::deadline_after(options.timeout);
    const std::uint32_t peer = co_await resolve(peer_id, deadline);
    if (peer == rank) throw Fault{Status::INVALID_ARGUMENT, rank, "a transfer to this engine itself"};
    if (!serving.count(peer)) {
      // Ring even when dialing: the peer learns who we are and serves us.
      const std::vector<std::uint32_t> peers{peer};
      auto fault = co_await connector->connect(peers, deadline, true, true);
      if (fault) throw *fault;
      serve(peer);
    }
    std::byte* const buf = static_cast<std::byte*>(session.buffer().data());
    auto b = std::make_shared<Batch>(ex);
    for (const auto& piece : pieces) {
      if (piece.length == 0) continue;
      if (piece.local == nullptr) throw Fault{Status::INVALID_ARGUMENT, rank, "null local address"};
      for (std::size_t off = 0; off < piece.length; off += slot) {
        const std::size_t n = std::min(slot, piece.length - off);
        const std::size_t s = co_await acquire_slot(deadline);
        auto* local = static_cast<std::byte*>(piece.local) + off;
        if (is_write) std::memcpy(buf + s, local, n);
        const std::uint64_t id = next_id++;
        b->add();
        const std::uint64_t address = piece.peer_address + off;
        pending.emplace(id, Pending{peer, [self, b, s, n, local, is_write, buf, peer_id, address](
                                              Status st, const std::string& why) {
                                      if (st == Status::SUCCESS && !is_write) std::memcpy(local, buf + s, n);
                                      self->release_slot(s);
                                      if (st == Status::SUCCESS) return b->done(std::nullopt);
                                      std::string text = why;
                                      if (text.empty() && st == Status::OUT_OF_RANGE)
                                        text = "[" + std::to_string(address) + ", +" + std::to_string(n) +
                                               ") is not inside memory it registered";
                                      b->done(Fault{st, 0, "engine '" + peer_id + "': " + text});
                                    }});
        Message m;
        m.kind = is_write ? Kind::write : Kind::read;
        m.id = id;
        m.offset = s;
        m.length = n;
        m.address = address;
        session.async_ctrl_send(peer, CtrlMessage::from_bytes(encode(m)), [self, id](std::exception_ptr e) {
          if (e) self->finish(id, Status::PEER_LOST, "the request could not be sent");
        });
      }
    }
    // Every piece is answered or given up at the deadline (its slot stays taken until an answer).
    auto expiry = std::make_shared<asio::steady_timer>(ex, deadline);
    expiry->async_wait([b, weak = weak_from_this()](const runtime::error_code& ec) {
      if (!ec) b->add(), b->done(Fault{Status::TIMEOUT, 0, "no answer within the timeout"});
    });
    co_await b->wait();
    expiry->cancel();
  }

  struct Region {
    std::size_t length = 0;
    RegisteredMemory memory;
  };

  Session& session;
  Store& store;
  const std::uint32_t rank;
  const std::string unique_id;
  const TransferEngineOptions options;
  const runtime::loop_executor ex;
  std::shared_ptr<Connector> connector;
  std::size_t slot = 0;
  // Loop thread.
  std::map<std::uint64_t, Region> regions;  // by start address
  std::map<std::string, std::uint32_t> ranks;
  std::set<std::uint32_t> serving;
  std::map<std::uint64_t, Pending> pending;
  std::deque<std::size_t> free_slots;
  std::vector<std::shared_ptr<asio::steady_timer>> slot_waiters;
  std::uint64_t next_id = 1;
  bool closed = false;
};

}  // namespace detail

TransferEngine::TransferEngine(const std::string& store_url, const std::string& unique_id,
                               TransferEngineOptions options) {
  if (unique_id.empty() || unique_id.find('/') != std::string::npos)
    throw InvalidArgumentError("engine id '" + unique_id + "' must be non-empty and without '/'");
  detail::take_session_auth(options.store, options.session);
  session_ = std::make_unique<Session>(options.session);
  store_ = std::make_unique<Store>(store_url, options.store, session_->event_loop());
  const std::int64_t n = store_->add("te/next_rank", 1) - 1;
  if (n < 0 || n > static_cast<std::int64_t>(UINT32_MAX))
    throw ProtocolError("the store handed out rank " + std::to_string(n));
  const auto rank = static_cast<std::uint32_t>(n);
  if (store_->compare_set("te/id/" + unique_id, "", std::to_string(rank)) != std::to_string(rank))
    throw InvalidConfigError("engine id '" + unique_id + "' is taken in job '" + store_->job_id() + "'");
  const std::string ip = options.local_ip.empty() ? store_->local_address() : options.local_ip;
  session_->init_server(ip, 0, 0, 0, rank);
  store_->set("te/" + std::to_string(rank) + "/addr", ip + " " + std::to_string(session_->ctrl_port()));
  impl_ = std::make_shared<detail::TransferEngineImpl>(*session_, *store_, rank, unique_id, std::move(options));
  impl_->start();
}

TransferEngine::~TransferEngine() { close(); }

const std::string& TransferEngine::unique_id() const noexcept { return impl_->unique_id; }
std::uint32_t TransferEngine::rank() const noexcept { return impl_->rank; }
std::uint16_t TransferEngine::rpc_port() const { return session_->ctrl_port(); }
Session& TransferEngine::session() noexcept { return *session_; }

void TransferEngine::register_memory(void* address, std::size_t length) {
  if (address == nullptr || length == 0) throw InvalidArgumentError("register_memory: null address or zero length");
  RegisteredMemory m = session_->register_memory(address, length);
  const auto base = reinterpret_cast<std::uint64_t>(address);
  std::string listing;
  session_->event_loop().call([&] {
    auto& regions = impl_->regions;
    auto next = regions.lower_bound(base);
    if (next != regions.end() && next->first < base + length)
      throw InvalidArgumentError("register_memory: overlaps the region at " + std::to_string(next->first));
    if (next != regions.begin() && std::prev(next)->first + std::prev(next)->second.length > base)
      throw InvalidArgumentError("register_memory: overlaps the region at " + std::to_string(std::prev(next)->first));
    regions.emplace(base, detail::TransferEngineImpl::Region{length, std::move(m)});
    for (const auto& [b, r] : regions) listing += std::to_string(b) + " " + std::to_string(r.length) + "\n";
  });
  store_->set("te/" + std::to_string(rank()) + "/regions", listing);  // for tools and curious peers
}

void TransferEngine::unregister_memory(void* address) {
  const auto base = reinterpret_cast<std::uint64_t>(address);
  std::string listing;
  RegisteredMemory gone;
  session_->event_loop().call([&] {
    auto& regions = impl_->regions;
    auto it = regions.find(base);
    if (it == regions.end()) throw NotFoundError("unregister_memory: no region starts at " + std::to_string(base));
    gone = std::move(it->second.memory);
    regions.erase(it);
    for (const auto& [b, r] : regions) listing += std::to_string(b) + " " + std::to_string(r.length) + "\n";
  });
  gone = RegisteredMemory{};  // unmapped once the transfers using it are done
  store_->set("te/" + std::to_string(rank()) + "/regions", listing);
}

void TransferEngine::submit(const std::shared_ptr<detail::TransferEngineImpl>& impl, bool is_write, std::string peer,
                            std::vector<TransferPiece> pieces, handler h) {
  if (impl->closed) {
    runtime::complete_later(impl->ex, std::move(h), std::make_exception_ptr(ClosedError("the engine is closed")));
    return;
  }
  runtime::asio::co_spawn(
      impl->ex,
      [impl, is_write, peer = std::move(peer), pieces = std::move(pieces)]() -> runtime::asio::awaitable<void> {
        try {
          co_await impl->transfer(is_write, peer, pieces);
        } catch (const detail::Fault& f) {
          std::rethrow_exception(
              make_error(make_error_code(f.status), (is_write ? "write to " : "read from ") + f.what));
        }
      },
      [h = std::move(h)](std::exception_ptr e) mutable { std::move(h)(e); });
}

void TransferEngine::blocking(bool is_write, const std::string& peer, std::vector<TransferPiece> pieces) {
  auto& loop = session_->event_loop();
  if (loop.in_loop_thread()) throw InvalidArgumentError("TransferEngine blocks: call it off the session's loop thread");
  auto f = start(is_write, peer, std::move(pieces), runtime::asio::use_future);
  if (!loop.wait(f, runtime::deadline_after(impl_->options.timeout + std::chrono::seconds(10))))
    throw TimeoutError("transfer to engine '" + peer + "' not complete");
  f.get();
}

void TransferEngine::write(const std::string& peer, const void* local, std::uint64_t peer_address, std::size_t length) {
  blocking(true, peer, {TransferPiece{const_cast<void*>(local), peer_address, length}});
}

void TransferEngine::read(const std::string& peer, void* local, std::uint64_t peer_address, std::size_t length) {
  blocking(false, peer, {TransferPiece{local, peer_address, length}});
}

void TransferEngine::write_batch(const std::string& peer, std::vector<TransferPiece> pieces) {
  blocking(true, peer, std::move(pieces));
}

void TransferEngine::close() {
  if (!session_) return;
  if (impl_) {
    session_->event_loop().call([impl = impl_] {
      impl->closed = true;
      for (auto& t : impl->slot_waiters) t->cancel();
    });
  }
  if (store_) store_->close();
  session_->close();
  if (impl_ && impl_->connector) impl_->connector->stop();
}

}  // namespace hmc
