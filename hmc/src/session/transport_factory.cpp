// The only place that knows which transport carries a session's data, and which memory its buffer is.
#include "session/session_impl.hpp"

#include <cstdlib>

#include "hmc/error.hpp"
#include "staging/device_copier.hpp"
#include "tcp/tcp_transport.hpp"
#include "transport/routed_transport.hpp"
#include "ucx/ucx_host_memory.hpp"
#include "ucx/ucx_transport.hpp"
#include "verbs/verbs_transport.hpp"

namespace hmc::detail {

// Host buffers come from UCX (shared memory same-host peers map); device buffers from their backend.
std::shared_ptr<Memory> SessionImpl::buffer_memory() const {
  if (opts.mem_type == MemoryType::CPU || opts.mem_type == MemoryType::DEFAULT)
    return std::make_shared<UcxHostMemory>(ucx_context, opts.device_id);
  return device_memory(opts.mem_type, opts.device_id);
}

// The only place that knows which transports carry the data; everything else uses Transport. UCX
// is built now, RDMA on first use (or now, for a session whose default it is).
void SessionImpl::start_on_loop() {
  std::vector<MultiTransport::Plane> planes{{"UCX", [this] { return make_transport(ConnType::UCX); }},
                                            {"RDMA", [this] { return make_transport(ConnType::RDMA); }}};
  install(std::make_unique<MultiTransport>(loop.executor(), std::move(planes)));
  use_conn(opts.conn_type);
  conn = opts.conn_type;
}

std::unique_ptr<Transport> SessionImpl::make_transport(ConnType type) {
  const EngineOptions engine{opts.timeout, opts.max_inflight};
  const std::size_t max_message = std::size_t{opts.ctrl.max_frame_length} + 1;  // the kind byte
  if (type == ConnType::RDMA) {
    VerbsOptions vo;
    vo.engine = engine;
    vo.max_message = max_message;
    vo.device = opts.rdma_device;
    vo.port = opts.rdma_device_port;
    vo.gid_index = opts.rdma_gid_index;
    vo.num_chs = opts.num_chs;
    return std::make_unique<StagingTransport>(loop, *buffer, staging_options(type), [&](ConnBuffer& exposed) {
      return std::make_unique<VerbsTransport>(loop, verbs_api(), exposed, vo);
    });
  }
  UcxOptions uo;
  uo.engine = engine;
  uo.max_message = max_message;
  TcpOptions to;
  to.engine = engine;
  to.max_message = max_message;
  to.keepalive = opts.ucx_keepalive;
  // Device memory UCX cannot move is staged through host memory (docs/gpu-staging.md).
  return std::make_unique<StagingTransport>(loop, *buffer, staging_options(type), [&](ConnBuffer& exposed) {
    return std::make_unique<RoutedTransport>(std::make_unique<UcxTransport>(loop, ucx_context, exposed, uo),
                                             std::make_unique<TcpTransport>(loop, exposed, to), opts.shared_memory);
  });
}

// Verbs moves host memory only (no GPUDirect): device memory is staged over it too.
StagingOptions SessionImpl::staging_options(ConnType type) const {
  std::vector<MemoryType> native = type == ConnType::RDMA ? std::vector<MemoryType>{MemoryType::CPU}
                                                          : ucx_context->memory_types();
  return StagingOptions{opts.staging_bytes, opts.staging_chunk, opts.timeout, std::move(native)};
}

// rdma-core, unless the tests asked for the emulated fabric explicitly.
std::shared_ptr<VerbsApi> SessionImpl::verbs_api() const {
  const char* env = std::getenv("HMC_VERBS_EMULATION");
  if (opts.verbs_emulation || (env != nullptr && std::string(env) == "1")) {
    const VerbsApiFactory emulated = emulated_verbs();
    if (emulated == nullptr)
      throw UnsupportedError("verbs_emulation / HMC_VERBS_EMULATION=1: the emulated RDMA fabric is part of HMC's test "
                             "library, not of this build; unset it to use rdma-core");
    log().warn("RDMA over the in-process EMULATED fabric (verbs_emulation / HMC_VERBS_EMULATION=1): "
               "for tests only, nothing leaves this process");
    return emulated();
  }
  return make_ibverbs_api();
}

void SessionImpl::install(std::unique_ptr<MultiTransport> t) {
  transport = std::move(t);
  transport->on_peer_failed = [weak = weak_from_this()](std::uint32_t rank, error_code ec) {
    if (auto self = weak.lock())
      self->peer_down(rank, status_of(ec) == Status::PROTOCOL_ERROR
                                ? "it broke the data-plane protocol and was disconnected (see the log)"
                                : "its data connection failed (the log has the transport's reason)");
  };
  transport->on_peer_ready = [weak = weak_from_this()](std::uint32_t rank) {
    if (auto self = weak.lock()) self->peer_ready(rank);
  };
  transport->on_message = [weak = weak_from_this()](std::uint32_t rank, std::span<const std::byte> bytes) {
    if (auto self = weak.lock()) self->fast_message(rank, bytes);
  };
  transport->attach();
}

// A transport this session will carry data over: built unless it is; why it cannot be is the
// factory's typed error (UnsupportedError with no RDMA device).
void SessionImpl::use_conn(ConnType type) { transport->build(plane_of(type)); }

// A client's HELLO names the transport it wants: served when this session has it or can build it.
std::string SessionImpl::admit_plane(std::uint8_t plane) {
  if (closed || !transport) return "the session is closing";
  if (plane >= transport->plane_count()) return "no data transport " + std::to_string(plane) + " in this build";
  try {
    transport->build(plane);
    return {};
  } catch (const std::exception& e) {
    log().warn("a client asked for {} and this session cannot serve it: {}", transport->plane_name(plane), e.what());
    return "this session serves no " + transport->plane_name(plane) + ": " + e.what();
  }
}

}  // namespace hmc::detail
