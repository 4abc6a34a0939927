#include "staging/device_copier.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "hmc/error.hpp"
#include "staging/device_stand_in.hpp"

namespace hmc::detail {

#ifdef HMC_HAVE_CUDA
std::shared_ptr<DeviceCopier> open_cuda_copier(int device_id);
#endif
#ifdef HMC_HAVE_HIP
std::shared_ptr<DeviceCopier> open_hip_copier(int device_id);
#endif

DeviceCopier::DeviceCopier(MemoryType type, int device_id) : type_(type), device_id_(device_id) {
  efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd_ < 0) throw Error(Status::ERROR, std::string("eventfd for device copies: ") + std::strerror(errno));
}

DeviceCopier::~DeviceCopier() {
  if (efd_ >= 0) ::close(efd_);
}

void DeviceCopier::finished(std::uint64_t id, error_code ec) noexcept {
  {
    std::lock_guard lock(mutex_);
    done_.push_back(Done{id, ec});
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(efd_, &one, sizeof one);  // EAGAIN only at 2^64-1: still readable
}

void DeviceCopier::drain(std::vector<Done>& out) {
  std::uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = ::read(efd_, &count, sizeof count);  // EAGAIN: nothing new
  std::lock_guard lock(mutex_);
  out.insert(out.end(), done_.begin(), done_.end());
  done_.clear();
}

bool is_device_memory(MemoryType type) noexcept { return type != MemoryType::CPU && type != MemoryType::DEFAULT; }

namespace {
// One slot per memory type (the enum's values are small).
std::array<std::atomic<DeviceStandIn*>, 8> g_stand_ins{};

std::atomic<DeviceStandIn*>* stand_in_slot(MemoryType type) noexcept {
  const auto i = static_cast<std::size_t>(type);
  return is_device_memory(type) && i < g_stand_ins.size() ? &g_stand_ins[i] : nullptr;
}
}  // namespace

void DeviceStandIn::set(MemoryType type, DeviceStandIn* stand_in) noexcept {
  if (auto* slot = stand_in_slot(type)) slot->store(stand_in);
}

DeviceStandIn* DeviceStandIn::of(MemoryType type) noexcept {
  auto* slot = stand_in_slot(type);
  return slot != nullptr ? slot->load() : nullptr;
}

std::shared_ptr<DeviceCopier> open_device_copier(MemoryType type, int device_id) {
  if (DeviceStandIn* stand_in = DeviceStandIn::of(type)) return stand_in->open_copier(device_id);
  switch (type) {
#ifdef HMC_HAVE_CUDA
    case MemoryType::NVIDIA_GPU: return open_cuda_copier(device_id);
#endif
#ifdef HMC_HAVE_HIP
    case MemoryType::AMD_GPU: return open_hip_copier(device_id);
#endif
    default:
      throw UnsupportedError("staging " + std::string(to_string(type)) +
                             " memory through host buffers needs its device backend, which this build lacks");
  }
}

std::shared_ptr<Memory> device_memory(MemoryType type, int device_id) {
  if (DeviceStandIn* stand_in = DeviceStandIn::of(type)) return stand_in->memory(device_id);
  return std::shared_ptr<Memory>(Memory::create(type, device_id));
}

}  // namespace hmc::detail
