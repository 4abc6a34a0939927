#include "transport/region_table.hpp"

namespace hmc::detail {

RegionTable::~RegionTable() {
  for (auto& [id, r] : regions_)
    if (r.owned && r.handle != nullptr) unmap_(r.handle);
}

std::uint64_t RegionTable::add(Region r) {
  const std::uint64_t id = next_++;
  regions_[id] = r;
  return id;
}

const RegionTable::Region* RegionTable::find(std::uint64_t id) const {
  auto it = regions_.find(id);
  return it == regions_.end() || it->second.unregistered ? nullptr : &it->second;
}

const RegionTable::Region* RegionTable::in_use(std::uint64_t id) const {
  auto it = regions_.find(id);
  return it == regions_.end() ? nullptr : &it->second;
}

void RegionTable::acquire(std::uint64_t id) {
  auto it = regions_.find(id);
  if (it != regions_.end()) ++it->second.users;
}

void RegionTable::release(std::uint64_t id) {
  auto it = regions_.find(id);
  if (it == regions_.end() || it->second.users == 0) return;
  --it->second.users;
  drop_if_unused(it);
}

void RegionTable::unregister(std::uint64_t id) {
  auto it = regions_.find(id);
  if (id == 0 || it == regions_.end() || it->second.unregistered) return;
  it->second.unregistered = true;
  drop_if_unused(it);
}

void RegionTable::drop_if_unused(std::map<std::uint64_t, Region>::iterator it) {
  if (!it->second.unregistered || it->second.users != 0) return;
  if (it->second.owned && it->second.handle != nullptr) unmap_(it->second.handle);
  regions_.erase(it);
}

}  // namespace hmc::detail
