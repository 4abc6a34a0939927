#pragma once
// Memory a transport can move bytes from and to: the session buffer (id 0) and user memory
// registered with it. A region unregistered while operations still use it is unmapped when the
// last of them is released. Transport-independent: the handle is the transport's (a UCX memh, a
// verbs MR). Loop thread only.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

namespace hmc::detail {

class RegionTable {
 public:
  struct Region {
    void* base = nullptr;
    std::size_t size = 0;
    void* handle = nullptr;     // the transport's registration
    bool owned = true;          // false: the memory's allocator owns the registration (never unmapped here)
    std::size_t users = 0;      // operations not yet released
    bool unregistered = false;  // unmap when users drops to 0
  };

  // `unmap` releases a registration the table owns (called when a region is finally dropped).
  explicit RegionTable(std::function<void(void* handle)> unmap) : unmap_(std::move(unmap)) {}
  ~RegionTable();  // unmaps what is left
  RegionTable(const RegionTable&) = delete;
  RegionTable& operator=(const RegionTable&) = delete;

  // The session buffer is region 0; user memory gets 1, 2, ... (never reused).
  void set_buffer(Region r) { regions_[0] = r; }
  std::uint64_t add(Region r);

  // A region operations may use: nullptr when unknown or unregistered.
  const Region* find(std::uint64_t id) const;
  // A region an operation in flight uses (also after it was unregistered); nullptr when unknown.
  const Region* in_use(std::uint64_t id) const;

  void acquire(std::uint64_t id);
  void release(std::uint64_t id);
  // No new operation may use it; unmapped now or when its last operation is released.
  void unregister(std::uint64_t id);

 private:
  void drop_if_unused(std::map<std::uint64_t, Region>::iterator it);

  std::function<void(void* handle)> unmap_;
  std::map<std::uint64_t, Region> regions_;
  std::uint64_t next_ = 1;
};

}  // namespace hmc::detail
