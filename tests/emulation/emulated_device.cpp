#include "emulated_device.hpp"

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"

namespace hmc::detail {

namespace {

// Per memory type (the enum's values are small): stalled, failures to inject, copies made. Whether
// it is enabled is whether the type has a DeviceStandIn.
struct EmulationState {
  std::atomic<bool> stalled{false};
  std::atomic<int> failures{0};
  std::atomic<std::uint64_t> copies{0};
};
std::array<EmulationState, 8> g_state;

EmulationState& state(MemoryType type) { return g_state[static_cast<std::size_t>(type) % g_state.size()]; }

class EmulatedCopier final : public DeviceCopier {
 public:
  EmulatedCopier(MemoryType type, int device_id) : DeviceCopier(type, device_id) {}

  error_code start(Direction, void* dst, const void* src, std::size_t n, std::uint64_t id) override {
    EmulationState& s = state(type());
    s.copies.fetch_add(1);
    if (s.stalled.load()) return {};  // accepted, never reported: a device that stopped
    int f = s.failures.load();
    while (f > 0 && !s.failures.compare_exchange_weak(f, f - 1)) {
    }
    if (f > 0) {
      finished(id, make_error_code(Status::ERROR));
      return {};
    }
    std::memcpy(dst, src, n);
    finished(id, {});  // reported through the fd like a driver callback, never inline
    return {};
  }
  void* allocate_pinned(std::size_t n) override {
    void* p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    if (p == nullptr) throw Error(Status::ERROR, "emulated pinned host allocation of " + std::to_string(n) + " bytes");
    return p;
  }
  void free_pinned(void* p, std::size_t) noexcept override { std::free(p); }
};

}  // namespace

DeviceEmulation::DeviceEmulation(MemoryType type) : type_(type) {
  EmulationState& s = state(type);
  if (DeviceStandIn::of(type) != nullptr)
    throw InvalidArgumentError("device emulation of this type is enabled already");
  s.stalled = false;
  s.failures = 0;
  s.copies = 0;
  DeviceStandIn::set(type, this);
  runtime::log().warn("EMULATED {} device enabled (tests only): host memory copied with memcpy", to_string(type));
}

DeviceEmulation::~DeviceEmulation() { DeviceStandIn::set(type_, nullptr); }
void DeviceEmulation::stall(bool on) noexcept { state(type_).stalled = on; }
void DeviceEmulation::fail_next(int n) noexcept { state(type_).failures = n; }
std::uint64_t DeviceEmulation::copies() const noexcept { return state(type_).copies.load(); }

std::shared_ptr<DeviceCopier> DeviceEmulation::open_copier(int device_id) {
  return std::make_shared<EmulatedCopier>(type_, device_id);
}

std::shared_ptr<Memory> DeviceEmulation::memory(int device_id) {
  return std::make_shared<EmulatedDeviceMemory>(type_, device_id);
}

void* EmulatedDeviceMemory::allocate(std::size_t size) {
  if (size == 0) throw InvalidArgumentError("emulated device allocation of 0 bytes: ask for at least 1 byte");
  void* p = std::aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  if (p == nullptr) throw Error(Status::ERROR, "emulated device allocation of " + std::to_string(size) + " bytes");
  return p;
}

void EmulatedDeviceMemory::free(void* ptr, std::size_t) noexcept { std::free(ptr); }

void EmulatedDeviceMemory::copy_host_to_device(void* dst, const void* src, std::size_t n) const {
  if (n != 0) std::memcpy(dst, src, n);
}

void EmulatedDeviceMemory::copy_device_to_host(void* dst, const void* src, std::size_t n) const {
  if (n != 0) std::memcpy(dst, src, n);
}

void EmulatedDeviceMemory::copy_device_to_device(void* dst, const void* src, std::size_t n) const {
  if (n != 0) std::memmove(dst, src, n);
}

}  // namespace hmc::detail
