// DeviceCopier on CUDA: one non-blocking stream per copier; each copy is followed by a stream
// callback that reports it (with the stream's status) through the copier's fd.
#include <string>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "memory/cuda_api.hpp"
#include "staging/device_copier.hpp"

namespace hmc::detail {

namespace {

std::string describe(cudaError_t e) {
  return std::string(cuda_api().cudaGetErrorString(e)) + " (" + cuda_api().cudaGetErrorName(e) + ")";
}

class CudaCopier final : public DeviceCopier {
 public:
  explicit CudaCopier(int device_id) : DeviceCopier(MemoryType::NVIDIA_GPU, device_id) {
    check(cuda_api().cudaSetDevice(device_id), "cudaSetDevice(" + std::to_string(device_id) + ")");
    check(cuda_api().cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~CudaCopier() override {
    // Outstanding callbacks name this copier: let them run before it goes.
    if (cuda_api().cudaStreamSynchronize(stream_) != cudaSuccess) static_cast<void>(cuda_api().cudaGetLastError());
    if (cuda_api().cudaStreamDestroy(stream_) != cudaSuccess) static_cast<void>(cuda_api().cudaGetLastError());
  }

  error_code start(Direction d, void* dst, const void* src, std::size_t n, std::uint64_t id) override {
    const cudaMemcpyKind kind = d == Direction::to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    cudaError_t e = cuda_api().cudaMemcpyAsync(dst, src, n, kind, stream_);
    if (e == cudaSuccess) e = cuda_api().cudaStreamAddCallback(stream_, &CudaCopier::on_done, new Pending{this, id}, 0);
    if (e == cudaSuccess) return {};
    static_cast<void>(cuda_api().cudaGetLastError());
    runtime::log().warn("cuda staging copy of {} bytes on device {} refused: {}", n, device_id(), describe(e));
    return make_error_code(Status::ERROR);
  }

  void* allocate_pinned(std::size_t n) override {
    void* p = nullptr;
    check(cuda_api().cudaHostAlloc(&p, n, cudaHostAllocPortable), "cudaHostAlloc of " + std::to_string(n) + " bytes");
    return p;
  }
  void synchronize() noexcept override {
    if (cuda_api().cudaStreamSynchronize(stream_) != cudaSuccess) static_cast<void>(cuda_api().cudaGetLastError());
  }
  void free_pinned(void* p, std::size_t) noexcept override {
    if (cuda_api().cudaFreeHost(p) != cudaSuccess) static_cast<void>(cuda_api().cudaGetLastError());
  }

 private:
  struct Pending {
    CudaCopier* self;
    std::uint64_t id;
  };
  // A driver thread: only records (no CUDA call is allowed here).
  static void CUDART_CB on_done(cudaStream_t, cudaError_t status, void* data) {
    auto* p = static_cast<Pending*>(data);
    p->self->finished(p->id, status == cudaSuccess ? error_code{} : make_error_code(Status::ERROR));
    delete p;
  }
  static void check(cudaError_t e, const std::string& what) {
    if (e == cudaSuccess) return;
    static_cast<void>(cuda_api().cudaGetLastError());
    throw Error(Status::ERROR, what + ": " + describe(e));
  }

  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::shared_ptr<DeviceCopier> open_cuda_copier(int device_id) { return std::make_shared<CudaCopier>(device_id); }

}  // namespace hmc::detail
