// The seam's real implementation: one call into libibverbs per method, nothing else.
#include <atomic>
#include <cerrno>

#include "verbs/verbs_api.hpp"

namespace hmc::detail {
namespace {

class IbverbsApi final : public VerbsApi {
 public:
  std::string name() const override { return "rdma-core"; }

  std::vector<std::string> devices() override {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    std::vector<std::string> out;
    for (int i = 0; list != nullptr && i < n; ++i) out.emplace_back(ibv_get_device_name(list[i]));
    if (list != nullptr) ibv_free_device_list(list);
    return out;
  }

  ibv_context* open_device(const std::string& name) override {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ibv_context* context = nullptr;
    errno = ENODEV;
    for (int i = 0; list != nullptr && i < n && context == nullptr; ++i)
      if (name == ibv_get_device_name(list[i])) context = ibv_open_device(list[i]);
    if (list != nullptr) ibv_free_device_list(list);
    return context;
  }

  int close_device(ibv_context* context) override { return ibv_close_device(context); }
  int query_port(ibv_context* context, std::uint8_t port, ibv_port_attr& attr) override {
    return ibv_query_port(context, port, &attr);
  }
  int query_gid(ibv_context* context, std::uint8_t port, int index, ibv_gid& gid) override {
    return ibv_query_gid(context, port, index, &gid);
  }
  ibv_pd* alloc_pd(ibv_context* context) override { return ibv_alloc_pd(context); }
  int dealloc_pd(ibv_pd* pd) override { return ibv_dealloc_pd(pd); }
  ibv_mr* reg_mr(ibv_pd* pd, void* addr, std::size_t length, int access) override {
    return ibv_reg_mr(pd, addr, length, access);
  }
  int dereg_mr(ibv_mr* mr) override { return ibv_dereg_mr(mr); }
  ibv_comp_channel* create_comp_channel(ibv_context* context) override { return ibv_create_comp_channel(context); }
  int destroy_comp_channel(ibv_comp_channel* channel) override { return ibv_destroy_comp_channel(channel); }
  ibv_cq* create_cq(ibv_context* context, int cqe, ibv_comp_channel* channel) override {
    return ibv_create_cq(context, cqe, nullptr, channel, 0);
  }
  int destroy_cq(ibv_cq* cq) override { return ibv_destroy_cq(cq); }
  int req_notify_cq(ibv_cq* cq, int solicited_only) override { return ibv_req_notify_cq(cq, solicited_only); }
  int get_cq_event(ibv_comp_channel* channel, ibv_cq** cq) override {
    void* context = nullptr;
    return ibv_get_cq_event(channel, cq, &context);
  }
  void ack_cq_events(ibv_cq* cq, unsigned int n) override { ibv_ack_cq_events(cq, n); }
  int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) override { return ibv_poll_cq(cq, n, wc); }
  ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr& attr) override { return ibv_create_qp(pd, &attr); }
  int modify_qp(ibv_qp* qp, ibv_qp_attr& attr, int mask) override { return ibv_modify_qp(qp, &attr, mask); }
  int destroy_qp(ibv_qp* qp) override { return ibv_destroy_qp(qp); }
  int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) override { return ibv_post_send(qp, wr, bad); }
  int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) override { return ibv_post_recv(qp, wr, bad); }
};

}  // namespace

std::shared_ptr<VerbsApi> make_ibverbs_api() { return std::make_shared<IbverbsApi>(); }

namespace {
std::atomic<VerbsApiFactory> g_emulated_verbs{nullptr};
}  // namespace

void register_emulated_verbs(VerbsApiFactory factory) noexcept { g_emulated_verbs.store(factory); }

VerbsApiFactory emulated_verbs() noexcept { return g_emulated_verbs.load(); }

}  // namespace hmc::detail
