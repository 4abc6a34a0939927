#include "transport/multi_transport.hpp"

#include "hmc/error.hpp"
#include "hmc/status.hpp"
#include "transport/forward_events.hpp"

namespace hmc::detail {

MultiTransport::MultiTransport(runtime::loop_executor executor, std::vector<Plane> planes)
    : executor_(std::move(executor)), planes_(std::move(planes)) {
  if (planes_.empty() || planes_.size() > 16) throw InvalidArgumentError("MultiTransport: 1 to 16 planes");
  built_.resize(planes_.size());
  build(0);
}

void MultiTransport::build(std::uint8_t p) {
  if (p >= planes_.size()) throw InvalidArgumentError("no data transport " + std::to_string(p));
  if (built_[p]) return;
  std::unique_ptr<Transport> t = planes_[p].make();
  // The regions registered so far, under this plane's own ids; a failure leaves the plane unbuilt.
  std::vector<std::pair<Region*, std::uint64_t>> added;
  try {
    for (auto& [id, r] : regions_) added.emplace_back(&r, t->register_region(r.base, r.size, r.type));
  } catch (...) {
    for (auto& [r, pid] : added) t->unregister_region(pid);
    throw;
  }
  for (auto& [r, pid] : added) r->ids[p] = pid;
  built_[p] = std::move(t);
  forward_events(*built_[p], *this, route_, p);
  if (expecting_losses_) built_[p]->expect_losses();
  if (attached_) built_[p]->attach();
}

void MultiTransport::attach() {
  attached_ = true;
  for (auto& t : built_)
    if (t) t->attach();
}

void MultiTransport::assign(std::uint32_t rank, std::uint8_t p) {
  if (!built(p)) throw InvalidArgumentError("data transport " + std::to_string(p) + " is not built");
  auto it = route_.find(rank);
  if (it != route_.end() && it->second != p) built_[it->second]->remove_peer(rank, make_error_code(Status::PEER_LOST));
  route_[rank] = p;
}

std::optional<std::uint8_t> MultiTransport::plane_of(std::uint32_t rank) const {
  auto it = route_.find(rank);
  if (it == route_.end()) return std::nullopt;
  return it->second;
}

Transport& MultiTransport::of(std::uint32_t rank) const {
  auto it = route_.find(rank);
  return it == route_.end() ? *built_[0] : *built_[it->second];
}

std::vector<std::byte> MultiTransport::local_info(std::uint32_t to, const LocalAddress& self) {
  if (route_.count(to) == 0) route_[to] = 0;
  return of(to).local_info(to, self);
}

std::string MultiTransport::add_peer(std::uint32_t rank, std::span<const std::byte> info) {
  auto it = route_.find(rank);
  if (it == route_.end()) return "rank " + std::to_string(rank) + " has no data transport assigned";
  return built_[it->second]->add_peer(rank, info);
}

void MultiTransport::remove_peer(std::uint32_t rank, error_code reason) {
  auto it = route_.find(rank);
  if (it == route_.end()) return;
  const std::uint8_t p = it->second;
  route_.erase(it);
  built_[p]->remove_peer(rank, reason);
}

const PeerRecord* MultiTransport::peer(std::uint32_t rank) const {
  auto it = route_.find(rank);
  return it == route_.end() ? nullptr : built_[it->second]->peer(rank);
}

std::vector<std::uint32_t> MultiTransport::ranks() const {
  std::vector<std::uint32_t> out;
  for (const auto& [rank, p] : route_)
    if (built_[p]->peer(rank) != nullptr) out.push_back(rank);
  return out;
}

void MultiTransport::submit(OpRequest request, Completion done) {
  Transport& t = of(request.rank);
  if (request.region != 0) {
    auto r = regions_.find(request.region);
    const std::uint8_t p = route_.count(request.rank) != 0 ? route_.at(request.rank) : 0;
    request.region = r == regions_.end() ? 0 : r->second.ids[p];
    if (request.region == 0) {  // the caller validated it on this thread: not reached
      runtime::asio::post(executor_, runtime::asio::append(std::move(done), make_error_code(Status::INVALID_ARGUMENT)));
      return;
    }
  }
  t.submit(std::move(request), std::move(done));
}

std::uint64_t MultiTransport::register_region(void* base, std::size_t size, MemoryType type) {
  Region r{base, size, type, std::vector<std::uint64_t>(planes_.size(), 0)};
  std::vector<std::uint8_t> done;
  try {
    for (std::uint8_t p = 0; p < built_.size(); ++p) {
      if (!built_[p]) continue;
      r.ids[p] = built_[p]->register_region(base, size, type);
      done.push_back(p);
    }
  } catch (...) {
    for (std::uint8_t p : done) built_[p]->unregister_region(r.ids[p]);
    throw;
  }
  const std::uint64_t id = next_region_++;
  regions_.emplace(id, std::move(r));
  return id;
}

void MultiTransport::unregister_region(std::uint64_t id) {
  auto it = regions_.find(id);
  if (it == regions_.end()) return;
  for (std::uint8_t p = 0; p < built_.size(); ++p)
    if (built_[p] && it->second.ids[p] != 0) built_[p]->unregister_region(it->second.ids[p]);
  regions_.erase(it);
}

std::size_t MultiTransport::region_size(std::uint64_t id) const {
  if (id == 0) return built_[0]->region_size(0);
  auto it = regions_.find(id);
  return it == regions_.end() ? 0 : it->second.size;
}

std::size_t MultiTransport::live_operations() const {
  std::size_t n = 0;
  for (const auto& t : built_)
    if (t) n += t->live_operations();
  return n;
}

void MultiTransport::add_stats(SessionStats& out) const {
  for (const auto& t : built_)
    if (t) t->add_stats(out);
}

void MultiTransport::expect_losses() {
  expecting_losses_ = true;
  for (auto& t : built_)
    if (t) t->expect_losses();
}

}  // namespace hmc::detail
