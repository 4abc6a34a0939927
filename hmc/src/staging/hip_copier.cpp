// DeviceCopier on HIP: one non-blocking stream per copier; each copy is followed by a stream
// callback that reports it (with the stream's status) through the copier's fd.
#include <string>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "memory/hip_api.hpp"
#include "staging/device_copier.hpp"

namespace hmc::detail {

namespace {

std::string describe(hipError_t e) {
  return std::string(hip_api().hipGetErrorString(e)) + " (" + hip_api().hipGetErrorName(e) + ")";
}

class HipCopier final : public DeviceCopier {
 public:
  explicit HipCopier(int device_id) : DeviceCopier(MemoryType::AMD_GPU, device_id) {
    check(hip_api().hipSetDevice(device_id), "hipSetDevice(" + std::to_string(device_id) + ")");
    check(hip_api().hipStreamCreateWithFlags(&stream_, hipStreamNonBlocking), "hipStreamCreateWithFlags");
  }
  ~HipCopier() override {
    // Outstanding callbacks name this copier: let them run before it goes.
    if (hip_api().hipStreamSynchronize(stream_) != hipSuccess) static_cast<void>(hip_api().hipGetLastError());
    if (hip_api().hipStreamDestroy(stream_) != hipSuccess) static_cast<void>(hip_api().hipGetLastError());
  }

  error_code start(Direction d, void* dst, const void* src, std::size_t n, std::uint64_t id) override {
    const hipMemcpyKind kind = d == Direction::to_device ? hipMemcpyHostToDevice : hipMemcpyDeviceToHost;
    hipError_t e = hip_api().hipMemcpyAsync(dst, src, n, kind, stream_);
    if (e == hipSuccess) e = hip_api().hipStreamAddCallback(stream_, &HipCopier::on_done, new Pending{this, id}, 0);
    if (e == hipSuccess) return {};
    static_cast<void>(hip_api().hipGetLastError());
    runtime::log().warn("hip staging copy of {} bytes on device {} refused: {}", n, device_id(), describe(e));
    return make_error_code(Status::ERROR);
  }

  void* allocate_pinned(std::size_t n) override {
    void* p = nullptr;
    check(hip_api().hipHostMalloc(&p, n, hipHostMallocPortable), "hipHostMalloc of " + std::to_string(n) + " bytes");
    return p;
  }
  void synchronize() noexcept override {
    if (hip_api().hipStreamSynchronize(stream_) != hipSuccess) static_cast<void>(hip_api().hipGetLastError());
  }
  void free_pinned(void* p, std::size_t) noexcept override {
    if (hip_api().hipHostFree(p) != hipSuccess) static_cast<void>(hip_api().hipGetLastError());
  }

 private:
  struct Pending {
    HipCopier* self;
    std::uint64_t id;
  };
  // A driver thread: only records (no HIP call is allowed here).
  static void on_done(hipStream_t, hipError_t status, void* data) {
    auto* p = static_cast<Pending*>(data);
    p->self->finished(p->id, status == hipSuccess ? error_code{} : make_error_code(Status::ERROR));
    delete p;
  }
  static void check(hipError_t e, const std::string& what) {
    if (e == hipSuccess) return;
    static_cast<void>(hip_api().hipGetLastError());
    throw Error(Status::ERROR, what + ": " + describe(e));
  }

  hipStream_t stream_ = nullptr;
};

}  // namespace

std::shared_ptr<DeviceCopier> open_hip_copier(int device_id) { return std::make_shared<HipCopier>(device_id); }

}  // namespace hmc::detail
