// A peer that does not play by the rules, at the data plane: it reaches a session's UCX worker
// directly (a raw UCX worker in this process, no Session) after an ordinary control connection.
// Forged fast-path senders are dropped, an oversized fast-path message, a second peer info or a
// malformed worker address disconnects its sender, and real peers keep working throughout.
#include <gtest/gtest.h>
#include <ucp/api/ucp.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include "hmc/ctrl_channel.hpp"
#include "session_test_util.hpp"
#include "transport/routed_transport.hpp"
#include "ucx/ucx_peer_info.hpp"
#include "wire/byte_order.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
namespace asio = runtime::asio;

// A UCX worker outside any Session, with one mapped page: how a hostile peer would reach us.
class RawUcxPeer {
 public:
  explicit RawUcxPeer(const std::string& tls) {
    ucp_config_t* config = nullptr;
    ucp_config_read(nullptr, nullptr, &config);
    ucp_config_modify(config, "TLS", tls.c_str());
    ucp_config_modify(config, "NET_DEVICES", "lo");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
    ok_ = ucp_init(&params, config, &context_) == UCS_OK;
    ucp_config_release(config);
    ucp_worker_params_t wp{};
    ok_ = ok_ && ucp_worker_create(context_, &wp, &worker_) == UCS_OK;
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length = 4096;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    ok_ = ok_ && ucp_mem_map(context_, &mp, &memh_) == UCS_OK;
  }
  ~RawUcxPeer() {
    if (ep_ != nullptr) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      wait(ucp_ep_close_nbx(ep_, &param));
    }
    if (memh_ != nullptr) ucp_mem_unmap(context_, memh_);
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
  }
  bool ok() const { return ok_; }

  // A well-formed peer info naming `rank` (a real address and rkey of this worker).
  std::vector<std::byte> peer_info(std::uint32_t rank) {
    detail::UcxPeerInfo info;
    info.rank = rank;
    ucp_address_t* address = nullptr;
    std::size_t len = 0;
    ucp_worker_get_address(worker_, &address, &len);
    info.worker_address.assign(reinterpret_cast<std::byte*>(address), reinterpret_cast<std::byte*>(address) + len);
    ucp_worker_release_address(worker_, address);
    void* rkey = nullptr;
    ucp_rkey_pack(context_, memh_, &rkey, &len);
    info.rkey.assign(static_cast<std::byte*>(rkey), static_cast<std::byte*>(rkey) + len);
    ucp_rkey_buffer_release(rkey);
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    ucp_mem_query(memh_, &attr);
    info.buffer_base = reinterpret_cast<std::uintptr_t>(attr.address);
    info.buffer_size = attr.length;
    return info.encode();
  }
  // The same as a UCX session's bootstrap message (its UCX part; no TCP part).
  std::vector<std::byte> session_info(std::uint32_t rank) { return detail::RoutedTransport::pack(peer_info(rank), {}); }

  void connect(const std::vector<std::byte>& address) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
    ok_ = ok_ && ucp_ep_create(worker_, &ep, &ep_) == UCS_OK;
  }

  // Progresses this worker (answering the server's wireup) until `done` or 10 s; false on timeout.
  template <class Done>
  bool progress_until(Done done) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= until) return false;
      ucp_worker_progress(worker_);
    }
    return true;
  }

  // One eager active message with HMC's control id (1), waited for locally.
  void send(std::span<const std::byte> header, std::span<const std::byte> body) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_EAGER;
    wait(ucp_am_send_nbx(ep_, 1, header.data(), header.size(), body.data(), body.size(), &param));
  }

 private:
  void wait(ucs_status_ptr_t r) {
    if (r == nullptr || UCS_PTR_IS_ERR(r)) return;
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (ucp_request_check_status(r) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until)
      ucp_worker_progress(worker_);
    ucp_request_free(r);
  }

  bool ok_ = false;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  ucp_ep_h ep_ = nullptr;
};

// A control connection as rank `rank` with no Session behind it; hands over the server's peer info.
class RawCtrlPeer {
 public:
  RawCtrlPeer(std::uint32_t rank, const std::string& dir) {
    loop_.start();
    CtrlOptions o;
    o.uds_dir = dir;
    channel_ = std::make_unique<CtrlChannel>(loop_, rank, o);
    channel_->set_handlers(CtrlHandlers{[](std::uint32_t, bool) {},
                                        [this](std::uint32_t, CtrlMessage m) {
                                          if (!got_info_) {
                                            got_info_ = true;
                                            info_.set_value(std::vector<std::byte>(m.bytes().begin(), m.bytes().end()));
                                          }
                                        },
                                        {}});
  }
  ~RawCtrlPeer() { channel_.reset(); }
  // Connects to the server and returns its decoded peer info.
  detail::UcxPeerInfo connect(std::uint16_t port) {
    channel_->async_connect("127.0.0.1", port, 5s, asio::use_future).get();
    auto f = info_.get_future();
    EXPECT_EQ(f.wait_for(10s), std::future_status::ready);
    std::vector<std::byte> ucx, tcp;
    EXPECT_EQ(detail::RoutedTransport::unpack(f.get(), ucx, tcp), "");
    detail::UcxPeerInfo info;
    EXPECT_EQ(detail::UcxPeerInfo::decode(ucx, info), "");
    return info;
  }
  void send_transport(std::vector<std::byte> bytes) {
    channel_->async_send(0, CtrlMessage::from_transport(bytes), asio::use_future).get();
  }
  // True when the server closed our control connection within `limit`.
  bool dropped_within(std::chrono::milliseconds limit) {
    try {
      channel_->async_recv(0, limit, asio::use_future).get();
    } catch (const PeerLostError&) {
      return true;
    } catch (const Error&) {
    }
    return false;
  }

 private:
  runtime::EventLoop loop_;
  std::unique_ptr<CtrlChannel> channel_;
  std::promise<std::vector<std::byte>> info_;
  bool got_info_ = false;
};

class HostilePeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto o = test::session_options("tcp", runtime::ProgressMode::event, 1u << 20, dir);
    o.ctrl.max_frame_length = 64u << 10;  // so that an oversized fast-path message is cheap to make
    o.ctrl.inbox_budget = 256u << 10;     // and so is filling an inbox
    server = std::make_unique<Session>(o);
    server->init_server("127.0.0.1", 1, 0, 0, 0, dir);
    client = std::make_unique<Session>(test::session_options("tcp", runtime::ProgressMode::event, 1u << 20, dir));
    client->connect(0, 1, "127.0.0.1", 1, server->ctrl_port());
    server->wait_peer(1, 10s);
  }
  void TearDown() override {
    client.reset();
    server.reset();
    std::filesystem::remove_all(dir);
  }
  // The fast path's header with the secret the server gave this peer: its messages are its own.
  static std::array<std::byte, 12> fast_header(const detail::UcxPeerInfo& info) {
    std::array<std::byte, 12> header{};
    detail::store_le32(header.data(), 0x31464d48);
    detail::store_le64(header.data() + 4, info.fast_token);
    return header;
  }
  static std::vector<std::byte> tag_body(std::uint64_t tag) {
    std::vector<std::byte> body(9);
    body[0] = static_cast<std::byte>(CtrlKind::tag);
    detail::store_le64(body.data() + 1, tag);
    return body;
  }
  // A raw peer holding its own fast-path secret sends `count` messages of `size` bytes and never a
  // SWITCH: true when the server disconnects it within 10 s.
  bool raw_fast_sender_dropped(std::size_t size, int count) {
    RawCtrlPeer ctrl(9, dir);
    const detail::UcxPeerInfo info = ctrl.connect(server->ctrl_port());
    RawUcxPeer raw("tcp");
    raw.connect(info.worker_address);
    if (!raw.ok()) {
      ADD_FAILURE() << "the raw UCX peer could not connect";
      return false;
    }
    std::vector<std::byte> body(size, std::byte{5});
    body[0] = static_cast<std::byte>(CtrlKind::bytes);
    for (int i = 0; i < count; ++i) raw.send(fast_header(info), body);
    return ctrl.dropped_within(10s);
  }
  // The real client still gets through, in order.
  void real_client_still_served() {
    client->ctrl_send(0, 4242);
    EXPECT_EQ(server->ctrl_recv(1, 5s), 4242u);
  }

  std::string dir = test::temp_dir();
  std::unique_ptr<Session> server, client;
};

// The sender of a fast-path message is who the transport identifies, never what its header says:
// a header naming rank 1 does not land in rank 1's inbox.
TEST_F(HostilePeerTest, ForgedFastPathSenderIsDropped) {
  RawCtrlPeer ctrl(9, dir);
  const detail::UcxPeerInfo info = ctrl.connect(server->ctrl_port());
  RawUcxPeer raw("tcp");
  raw.connect(info.worker_address);
  ASSERT_TRUE(raw.ok());
  std::array<std::byte, 4> rank_header{};
  detail::store_le32(rank_header.data(), 1);  // "I am rank 1"
  raw.send(rank_header, tag_body(666));
  std::array<std::byte, 12> guessed{};
  detail::store_le32(guessed.data(), 0x31464d48);  // the right magic with a guessed secret
  detail::store_le64(guessed.data() + 4, 1);
  raw.send(guessed, tag_body(667));
  EXPECT_THROW(server->ctrl_recv(1, 500ms), TimeoutError) << "a forged message reached rank 1's inbox";
  real_client_still_served();
}

// A fast-path message over the limit is refused before anything is allocated for it, and
// its sender (identified by the secret it was given) is disconnected.
TEST_F(HostilePeerTest, OversizedFastPathMessageDisconnectsItsSender) {
  EXPECT_TRUE(raw_fast_sender_dropped(128u << 10, 1)) << "the sender of an oversized message is still connected";
  real_client_still_served();
}

// Fast-path messages held before the sender's SWITCH are bounded in bytes (the inbox budget), not
// only in number: past it the sender is disconnected and nothing it sent is delivered.
TEST_F(HostilePeerTest, FastPathBytesBeforeTheSwitchPastTheInboxBudgetDisconnectTheSender) {
  // 8 x 60 KiB (each under max_frame_length) = 480 KiB, never a SWITCH.
  EXPECT_TRUE(raw_fast_sender_dropped(60u << 10, 8)) << "480 KiB held before the SWITCH with a 256 KiB inbox budget";
  real_client_still_served();
}

// After the SWITCH a fast-path sender cannot be paused as a socket can: one that keeps sending while
// nothing is received is disconnected at twice the inbox budget, and the receiver says why.
TEST_F(HostilePeerTest, AFastPathSenderThatOutrunsCtrlRecvIsDisconnected) {
  for (int i = 0; i < 12; ++i) {  // 12 x 60 KiB = 720 KiB > 2 x 256 KiB
    std::vector<std::byte> m(60u << 10, static_cast<std::byte>(i));
    try {
      client->async_ctrl_send(0, CtrlMessage::from_bytes(m), runtime::asio::use_future).get();
    } catch (const Error&) {
      break;  // the server may have cut us off already
    }
  }
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!server->peers().empty() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(server->peers().empty()) << "a sender 720 KiB ahead of ctrl_recv is still connected";
  try {
    server->put(1, 0, 0, 8);
    FAIL() << "a put to the disconnected sender succeeded";
  } catch (const PeerLostError& e) {
    EXPECT_NE(std::string(e.what()).find("outran ctrl_recv"), std::string::npos) << e.what();
  }
}

// A second peer info for a live peer would tear down its working endpoint (and fail its
// operations) on the peer's say-so. It is a protocol violation: the offender is disconnected.
TEST_F(HostilePeerTest, SecondPeerInfoForALivePeerDisconnectsIt) {
  RawCtrlPeer ctrl(9, dir);
  ctrl.connect(server->ctrl_port());
  RawUcxPeer raw("tcp");
  ASSERT_TRUE(raw.ok());
  ctrl.send_transport(raw.session_info(9));
  // The server's endpoint to us is usable once our worker has answered its wireup.
  ASSERT_TRUE(raw.progress_until([&] {
    try {
      server->wait_peer(9, 10ms);
      return true;
    } catch (const TimeoutError&) {
      return false;
    }
  }));
  ctrl.send_transport(raw.session_info(9));
  EXPECT_TRUE(ctrl.dropped_within(10s)) << "a second peer info was accepted";
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (server->peers().size() != 1 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server->peers(), std::vector<std::uint32_t>{1});
  real_client_still_served();
}

// A worker address UCX 1.13 would abort on (a version it asserts on) or read past (cut short) is
// refused before UCX sees it: its sender is dropped and the server keeps serving.
TEST_F(HostilePeerTest, MalformedWorkerAddressDropsItsSender) {
  RawUcxPeer raw("tcp");
  ASSERT_TRUE(raw.ok());
  std::uint32_t rank = 9;
  for (const auto& corrupt : {+[](std::vector<std::byte>& a) { a[0] = std::byte{2}; },
                              +[](std::vector<std::byte>& a) { a.resize(a.size() / 2); }}) {
    RawCtrlPeer ctrl(rank, dir);
    ctrl.connect(server->ctrl_port());
    detail::UcxPeerInfo info;
    ASSERT_EQ(detail::UcxPeerInfo::decode(raw.peer_info(rank), info), "");
    corrupt(info.worker_address);
    ctrl.send_transport(detail::RoutedTransport::pack(info.encode(), {}));
    EXPECT_TRUE(ctrl.dropped_within(10s)) << "a malformed worker address was accepted (rank " << rank << ")";
    ++rank;
  }
  real_client_still_served();
  EXPECT_EQ(server->peers(), std::vector<std::uint32_t>{1});
}

// The TCP sockets this process listens on, as "address:port" in /proc/net/tcp{,6}'s hex form.
std::vector<std::string> own_tcp_listeners() {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.starts_with("socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state == "0A" && inodes.count(inode) != 0) out.push_back(local);
    }
  }
  return out;
}

// With the default transports nothing in the process serves UCX's tcp (which reads and writes at
// any address for any connection, keyless): the only TCP listeners are the control port and the
// checked data listeners, and all of them are bound to the session's address, never every interface.
TEST(DataPlaneListeners, ADefaultSessionListensOnlyAtItsOwnAddressAndNeverServesUcxTcp) {
  const std::string dir = test::temp_dir();
  SessionOptions o;
  o.ctrl.uds_dir = dir;
  o.timeout = std::chrono::seconds(20);
  std::unique_ptr<Session> server, client;
  test::connect_pair(o, o, dir, 1, server, client);
  server->put(1, 0, 0, 64);
  const std::vector<std::string> listeners = own_tcp_listeners();
  EXPECT_FALSE(listeners.empty()) << "the control listener is missing from /proc/net/tcp";
  for (const std::string& l : listeners) EXPECT_TRUE(l.starts_with("0100007F:")) << "listening on " << l;
  // Control port + a data listener per session; UCX's tcp would add one per worker on 0.0.0.0.
  EXPECT_LE(listeners.size(), 3u);
  client.reset();
  server.reset();
  std::filesystem::remove_all(dir);
}

// Peers that share no memory (here: told not to) go over HMC's checked TCP path: every byte of puts
// and gets both ways lands, control messages ride it in order, and nothing of UCX's tcp is used.
TEST(DataPlaneListeners, PeersWithoutSharedMemoryUseTheCheckedTcpPathBothWays) {
  const std::string dir = test::temp_dir();
  SessionOptions o;
  o.ctrl.uds_dir = dir;
  o.timeout = std::chrono::seconds(20);
  o.buffer_size = 8u << 20;
  o.shared_memory = false;
  std::unique_ptr<Session> server, client;
  test::connect_pair(o, o, dir, 1, server, client);
  EXPECT_EQ(server->transports(1), "hmc-tcp");
  EXPECT_EQ(client->transports(0), "hmc-tcp");
  for (std::size_t size : {std::size_t{1}, std::size_t{100} << 10, std::size_t{4} << 20}) {
    test::fill(client->buffer(), 0, size, size);
    client->put(0, 0, 1000, size);
    EXPECT_TRUE(test::holds(server->buffer(), 1000, size, size)) << size << "-byte put";
    test::fill(server->buffer(), 0, size, size + 1);
    client->get(0, 4096, 0, size);
    EXPECT_TRUE(test::holds(client->buffer(), 4096, size, size + 1)) << size << "-byte get";
    test::fill(server->buffer(), 0, size, size + 2);
    server->put(1, 0, 77, size);
    EXPECT_TRUE(test::holds(client->buffer(), 77, size, size + 2)) << size << "-byte put the other way";
  }
  for (std::uint64_t tag = 1; tag <= 20; ++tag) client->ctrl_send(0, tag);
  for (std::uint64_t tag = 1; tag <= 20; ++tag) EXPECT_EQ(server->ctrl_recv(1, std::chrono::seconds(5)), tag);
  for (const std::string& l : own_tcp_listeners()) EXPECT_TRUE(l.starts_with("0100007F:")) << "listening on " << l;
  client.reset();
  server.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hmc
