#pragma once
// EMULATION: an in-process RDMA fabric behind the VerbsApi seam, for tests and for machines with no
// RDMA device. It never carries a byte out of this process and is used only when asked for
// (SessionOptions::verbs_emulation or HMC_VERBS_EMULATION=1). Every session of the process that
// asks for it shares one fabric (EmulatedFabric::shared()), so two sessions connect through it.
//
// What it models: one "NIC" thread executes send work requests asynchronously, in order per QP
// (RC ordering); RDMA WRITE / READ are memcpy between registered regions after lkey/rkey, protection
// domain, access and bounds checks; SEND consumes the peer's posted receives (waiting, like an RNR
// retry, while none is posted); completions go to CQs of bounded depth; a completion channel is an
// eventfd that becomes readable only for a CQ armed by req_notify_cq (the verbs arm contract); an
// error completion moves the QP to the error state and flushes every outstanding work request;
// destroying a CQ with unacknowledged events fails. Faults are injected by the tests below.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "verbs/verbs_api.hpp"

namespace hmc::detail {

class EmulatedFabric final : public VerbsApi {
 public:
  static constexpr const char* kDeviceName = "hmc_emulated0";

  // The process's fabric, created on first use and gone with its last user.
  static std::shared_ptr<EmulatedFabric> shared();

  EmulatedFabric();
  ~EmulatedFabric() override;
  EmulatedFabric(const EmulatedFabric&) = delete;
  EmulatedFabric& operator=(const EmulatedFabric&) = delete;

  // Fault injection. The next `count` send work requests executed (any QP) after `skip` more that
  // execute normally complete with `status` (their QP then enters the error state, as on hardware).
  void fail_next(ibv_wc_status status, int count = 1, int skip = 0);
  // Every send work request posted from now on executes no earlier than `delay` after its post.
  void set_delay(std::chrono::milliseconds delay);
  // Moves every QP to the error state now (a link or port failure): outstanding work is flushed.
  void break_all_qps();
  void reset_faults();

  struct Stats {
    std::uint64_t executed = 0;      // send work requests executed
    std::uint64_t cq_overflows = 0;  // completions that found their CQ full (never happens to a correct user)
    std::uint64_t sq_overflows = 0;  // post_send refused: send queue full
    std::size_t max_cq_fill = 0;     // the most completions any CQ held
    std::size_t qps = 0;             // QPs alive now
  };
  Stats stats() const;
  // The bytes of the largest RDMA WRITE or READ executed since the last call (how a test sees striping).
  std::size_t take_largest_rdma();

  // VerbsApi
  std::string name() const override { return "emulated"; }
  std::vector<std::string> devices() override;
  ibv_context* open_device(const std::string& name) override;
  int close_device(ibv_context* context) override;
  int query_port(ibv_context* context, std::uint8_t port, ibv_port_attr& attr) override;
  int query_gid(ibv_context* context, std::uint8_t port, int index, ibv_gid& gid) override;
  ibv_pd* alloc_pd(ibv_context* context) override;
  int dealloc_pd(ibv_pd* pd) override;
  ibv_mr* reg_mr(ibv_pd* pd, void* addr, std::size_t length, int access) override;
  int dereg_mr(ibv_mr* mr) override;
  ibv_comp_channel* create_comp_channel(ibv_context* context) override;
  int destroy_comp_channel(ibv_comp_channel* channel) override;
  ibv_cq* create_cq(ibv_context* context, int cqe, ibv_comp_channel* channel) override;
  int destroy_cq(ibv_cq* cq) override;
  int req_notify_cq(ibv_cq* cq, int solicited_only) override;
  int get_cq_event(ibv_comp_channel* channel, ibv_cq** cq) override;
  void ack_cq_events(ibv_cq* cq, unsigned int n) override;
  int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) override;
  ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr& attr) override;
  int modify_qp(ibv_qp* qp, ibv_qp_attr& attr, int mask) override;
  int destroy_qp(ibv_qp* qp) override;
  int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) override;
  int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) override;

 private:
  struct State;
  void run_nic();

  std::unique_ptr<State> s_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread nic_;
};

}  // namespace hmc::detail
