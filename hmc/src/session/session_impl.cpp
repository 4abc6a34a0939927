// SessionImpl's construction and its control channel.
#include "session/session_impl.hpp"

#include "hmc/error.hpp"

namespace hmc::detail {

SessionImpl::SessionImpl(runtime::EventLoop& l, SessionOptions o)
    : loop(l),
      opts(std::move(o)),
      ucx_context(UcxContext::create({opts.ucx_tls, opts.ucx_net_devices, opts.ucx_keepalive})),
      buffer(std::make_unique<ConnBuffer>(buffer_memory(), opts.buffer_size)),
      ready(l.executor()) {}

// The control channel exists once this session knows its own rank (init_server or connect).
void SessionImpl::ensure_ctrl(std::uint32_t self_id, const std::string& uds_dir) {
  if (ctrl) {
    if (self_id != CtrlChannel::any_rank && ctrl->rank() != self_id)
      throw InvalidArgumentError("self_id " + std::to_string(self_id) + " differs from this session's rank " +
                                 std::to_string(ctrl->rank()));
    return;
  }
  CtrlOptions co = opts.ctrl;
  if (!uds_dir.empty()) co.uds_dir = uds_dir;
  if (!opts.auth_key.empty()) co.auth_key = opts.auth_key;
  co.authenticate = opts.authenticate && co.authenticate;
  ctrl = std::make_unique<CtrlChannel>(loop, self_id, co);
  std::weak_ptr<SessionImpl> weak = weak_from_this();
  ctrl->set_handlers(CtrlHandlers{[weak](std::uint32_t rank, bool up) {
                                    auto self = weak.lock();
                                    if (!self) return;
                                    if (up) return self->peer_up(rank);
                                    const std::string why = self->ctrl->lost_reason(rank);
                                    self->peer_down(rank, "its control connection ended" +
                                                              (why.empty() ? std::string() : ": " + why));
                                  },
                                  [weak](std::uint32_t rank, CtrlMessage m) {
                                    if (auto self = weak.lock()) self->peer_info(rank, m);
                                  },
                                  [weak](std::uint8_t plane) {
                                    auto self = weak.lock();
                                    return self ? self->admit_plane(plane) : std::string("the session is gone");
                                  }});
}

}  // namespace hmc::detail
