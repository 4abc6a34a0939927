#pragma once
// The seam between VerbsTransport and the RDMA stack: exactly the verbs calls the transport makes,
// with libibverbs' own types. The product's implementation calls rdma-core (real hardware); the
// tests register an in-process emulated fabric to run the unchanged transport over.
// Calls return what the verbs call returns (0 or an errno value, nullptr with errno set).
#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <vector>

namespace hmc::detail {

class VerbsApi {
 public:
  virtual ~VerbsApi() = default;

  // "rdma-core" or "emulated": logs and error messages say which one carried the bytes.
  virtual std::string name() const = 0;

  // Names of the RDMA devices present (ibv_get_device_list).
  virtual std::vector<std::string> devices() = 0;
  virtual ibv_context* open_device(const std::string& name) = 0;
  virtual int close_device(ibv_context* context) = 0;
  virtual int query_port(ibv_context* context, std::uint8_t port, ibv_port_attr& attr) = 0;
  virtual int query_gid(ibv_context* context, std::uint8_t port, int index, ibv_gid& gid) = 0;

  virtual ibv_pd* alloc_pd(ibv_context* context) = 0;
  virtual int dealloc_pd(ibv_pd* pd) = 0;
  virtual ibv_mr* reg_mr(ibv_pd* pd, void* addr, std::size_t length, int access) = 0;
  virtual int dereg_mr(ibv_mr* mr) = 0;

  // The completion channel's fd must be made O_NONBLOCK by the caller (get_cq_event then says EAGAIN).
  virtual ibv_comp_channel* create_comp_channel(ibv_context* context) = 0;
  virtual int destroy_comp_channel(ibv_comp_channel* channel) = 0;
  virtual ibv_cq* create_cq(ibv_context* context, int cqe, ibv_comp_channel* channel) = 0;
  virtual int destroy_cq(ibv_cq* cq) = 0;  // every event taken by get_cq_event must be acked first
  virtual int req_notify_cq(ibv_cq* cq, int solicited_only) = 0;
  virtual int get_cq_event(ibv_comp_channel* channel, ibv_cq** cq) = 0;  // -1 with errno EAGAIN: none
  virtual void ack_cq_events(ibv_cq* cq, unsigned int n) = 0;
  virtual int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) = 0;  // completions taken, or < 0 on error

  virtual ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr& attr) = 0;
  virtual int modify_qp(ibv_qp* qp, ibv_qp_attr& attr, int mask) = 0;
  virtual int destroy_qp(ibv_qp* qp) = 0;
  virtual int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) = 0;
  virtual int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) = 0;
};

// The real thing: libibverbs (and whatever provider rdma-core loads for the device).
std::shared_ptr<VerbsApi> make_ibverbs_api();

// The emulated fabric SessionOptions::verbs_emulation and HMC_VERBS_EMULATION=1 ask for: registered
// by the test library when it is linked in, absent (nullptr) from the product.
using VerbsApiFactory = std::shared_ptr<VerbsApi> (*)();
void register_emulated_verbs(VerbsApiFactory factory) noexcept;
VerbsApiFactory emulated_verbs() noexcept;

}  // namespace hmc::detail
