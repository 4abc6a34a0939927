#pragma once
// DeviceCopier on a GPU runtime (Runtime: memory/cuda_api.hpp, memory/hip_api.hpp): one non-blocking
// stream per copier; each copy is followed by a stream callback that reports it (with the stream's
// status) through the copier's fd.
#include <memory>
#include <string>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "memory/gpu_runtime.hpp"
#include "staging/device_copier.hpp"

namespace hmc::detail {

template <class Runtime>
class GpuCopier final : public DeviceCopier {
 public:
  using Error = typename Runtime::Error;

  explicit GpuCopier(int device_id) : DeviceCopier(Runtime::memory_type, device_id) {
    check_gpu<Runtime>(api().set_device(device_id),
                       gpu_text(Runtime::symbols.set_device, "(" + std::to_string(device_id) + ")"));
    check_gpu<Runtime>(api().stream_create_with_flags(&stream_, Runtime::stream_non_blocking),
                       Runtime::symbols.stream_create_with_flags);
  }
  ~GpuCopier() override {
    // Outstanding callbacks name this copier: let them run before it goes.
    if (api().stream_synchronize(stream_) != Runtime::success) clear_gpu_error<Runtime>();
    if (api().stream_destroy(stream_) != Runtime::success) clear_gpu_error<Runtime>();
  }

  error_code start(Direction d, void* dst, const void* src, std::size_t n, std::uint64_t id) override {
    const auto kind = d == Direction::to_device ? Runtime::host_to_device : Runtime::device_to_host;
    Error e = api().memcpy_async(dst, src, n, kind, stream_);
    if (e == Runtime::success) e = api().stream_add_callback(stream_, &GpuCopier::on_done, new Pending{this, id}, 0);
    if (e == Runtime::success) return {};
    clear_gpu_error<Runtime>();
    runtime::log().warn("{} staging copy of {} bytes on device {} refused: {}", Runtime::lower_name, n, device_id(),
                        describe_gpu_error<Runtime>(e));
    return make_error_code(Status::ERROR);
  }

  void* allocate_pinned(std::size_t n) override {
    void* p = nullptr;
    check_gpu<Runtime>(api().host_alloc(&p, n, Runtime::host_alloc_portable),
                       gpu_text(Runtime::symbols.host_alloc, " of " + std::to_string(n) + " bytes"));
    return p;
  }
  void synchronize() noexcept override {
    if (api().stream_synchronize(stream_) != Runtime::success) clear_gpu_error<Runtime>();
  }
  void free_pinned(void* p, std::size_t) noexcept override {
    if (api().free_host(p) != Runtime::success) clear_gpu_error<Runtime>();
  }

 private:
  struct Pending {
    GpuCopier* self;
    std::uint64_t id;
  };
  static const GpuApi<Runtime>& api() { return gpu_api<Runtime>(); }
  // A driver thread: only records (no runtime call is allowed here).
  static void on_done(typename Runtime::Stream, Error status, void* data) {
    auto* p = static_cast<Pending*>(data);
    p->self->finished(p->id, status == Runtime::success ? error_code{} : make_error_code(Status::ERROR));
    delete p;
  }

  typename Runtime::Stream stream_ = nullptr;
};

}  // namespace hmc::detail
