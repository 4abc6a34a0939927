// The handshake state machines without sockets: who verifies what, and what never verifies.
#include <gtest/gtest.h>

#include "ctrl/ctrl_handshake.hpp"
#include "wire/byte_order.hpp"

namespace hmc::detail {
namespace {

AuthKey key_of(const std::string& s) {
  return AuthKey(reinterpret_cast<const std::byte*>(s.data()), reinterpret_cast<const std::byte*>(s.data()) + s.size());
}

// Splits a whole frame into (type, payload).
struct Parsed {
  FrameType type;
  std::vector<std::byte> payload;
};
Parsed parse(const std::vector<std::byte>& frame) {
  HeaderBytes hb;
  std::copy(frame.begin(), frame.begin() + kFrameHeaderSize, hb.begin());
  FrameHeader h;
  EXPECT_EQ(decode_header(hb, kMaxHandshakeFrame, h), "");
  return Parsed{h.type, std::vector<std::byte>(frame.begin() + kFrameHeaderSize, frame.end())};
}

HelloMsg hello_for(std::uint32_t rank) {
  HelloMsg h;
  h.rank = rank;
  h.heartbeat_ms = 1000;
  h.nonce = random_nonce();
  return h;
}

// Runs both machines against each other; returns the server's and the client's last steps.
struct Exchange {
  HandshakeStep server, client;
  std::vector<std::byte> client_sent;  // HELLO + PROOF, for replays
};
Exchange exchange(const AuthKey& ck, bool c_auth, const AuthKey& sk, bool s_auth, WelcomeMsg w = {}) {
  Exchange r;
  ClientHandshake c(ck, c_auth, hello_for(3));
  ServerHandshake s(sk, s_auth, random_nonce());
  auto hello = c.hello_frame();
  r.client_sent = hello;
  auto p = parse(hello);
  r.server = s.on_frame(p.type, p.payload);  // CHALLENGE
  p = parse(r.server.reply);
  r.client = c.on_frame(p.type, p.payload);  // PROOF
  r.client_sent.insert(r.client_sent.end(), r.client.reply.begin(), r.client.reply.end());
  p = parse(r.client.reply);
  r.server = s.on_frame(p.type, p.payload);
  if (r.server.what != HandshakeStep::What::verified) {
    p = parse(r.server.reply);  // REJECT
    r.client = c.on_frame(p.type, p.payload);
    return r;
  }
  w.rank = s.hello().rank;
  p = parse(s.welcome(w));
  r.client = c.on_frame(p.type, p.payload);
  return r;
}

TEST(CtrlHandshake, TheSameKeyVerifiesBothWays) {
  const auto k = key_of("job key");
  const Exchange r = exchange(k, true, k, true);
  EXPECT_EQ(r.server.what, HandshakeStep::What::verified) << r.server.why;
  EXPECT_EQ(r.client.what, HandshakeStep::What::verified) << r.client.why;
}

TEST(CtrlHandshake, AWrongKeyFailsAtTheServerWithAGenericReject) {
  const Exchange r = exchange(key_of("guess"), true, key_of("job key"), true);
  EXPECT_EQ(r.server.what, HandshakeStep::What::failed);
  EXPECT_EQ(r.server.code, RejectCode::auth_failed);
  EXPECT_EQ(r.client.what, HandshakeStep::What::failed);
  EXPECT_EQ(r.client.code, RejectCode::auth_failed);
  EXPECT_NE(r.client.why.find("authentication failed"), std::string::npos) << r.client.why;
}

TEST(CtrlHandshake, AServerWithoutTheKeyFailsAtTheClient) {
  // A server that skips verification (and so signs nothing) cannot prove itself.
  const Exchange r = exchange(key_of("job key"), true, key_of("other"), false);
  EXPECT_EQ(r.server.what, HandshakeStep::What::verified);
  EXPECT_EQ(r.client.what, HandshakeStep::What::failed);
  EXPECT_NE(r.client.why.find("server's proof"), std::string::npos) << r.client.why;
}

TEST(CtrlHandshake, OptingOutWorksOnlyWhenBothSidesDo) {
  EXPECT_EQ(exchange(key_of(""), false, key_of(""), false).client.what, HandshakeStep::What::verified);
  EXPECT_EQ(exchange(key_of(""), false, key_of("job key"), true).server.what, HandshakeStep::What::failed);
}

TEST(CtrlHandshake, AReplayedHelloAndProofNeverVerify) {
  const auto k = key_of("job key");
  const Exchange good = exchange(k, true, k, true);
  ASSERT_EQ(good.server.what, HandshakeStep::What::verified);
  // The recorded bytes against a new server: a fresh server nonce makes the old proof worthless.
  ServerHandshake s(k, true, random_nonce());
  const std::size_t hello_len = kFrameHeaderSize + encode_hello(HelloMsg{}).size();
  auto p = parse(std::vector<std::byte>(good.client_sent.begin(), good.client_sent.begin() + hello_len));
  EXPECT_EQ(s.on_frame(p.type, p.payload).what, HandshakeStep::What::reply);
  p = parse(std::vector<std::byte>(good.client_sent.begin() + hello_len, good.client_sent.end()));
  const auto step = s.on_frame(p.type, p.payload);
  EXPECT_EQ(step.what, HandshakeStep::What::failed);
  EXPECT_EQ(step.code, RejectCode::auth_failed);
}

TEST(CtrlHandshake, AServerProofReflectedAsAClientProofNeverVerifies) {
  const auto k = key_of("job key");
  const HelloMsg h = hello_for(4);
  const Nonce ns = random_nonce();
  ServerHandshake s(k, true, ns);
  const auto hello = encode_hello(h);
  s.on_frame(FrameType::hello, hello);
  const Mac reflected = server_proof(k, hello, ns, {});
  const auto step = s.on_frame(FrameType::proof, std::span<const std::byte>(reflected.data(), reflected.size()));
  EXPECT_EQ(step.what, HandshakeStep::What::failed);
}

TEST(CtrlHandshake, ATamperedWelcomeFailsAtTheClient) {
  const auto k = key_of("job key");
  ClientHandshake c(k, true, hello_for(kAnyRank));
  ServerHandshake s(k, true, random_nonce());
  auto p = parse(c.hello_frame());
  p = parse(s.on_frame(p.type, p.payload).reply);
  p = parse(c.on_frame(p.type, p.payload).reply);
  ASSERT_EQ(s.on_frame(p.type, p.payload).what, HandshakeStep::What::verified);
  WelcomeMsg w;
  w.rank = 1;
  w.uds_path = "/run/user/0/hmc/hmc-ctrl-1.sock";
  w.ticket = random_nonce();
  auto frame = s.welcome(w);
  // An on-path attacker points the client at its own socket.
  frame[kFrameHeaderSize + 47] = std::byte{'x'};
  p = parse(frame);
  const auto step = c.on_frame(p.type, p.payload);
  EXPECT_EQ(step.what, HandshakeStep::What::failed);
  EXPECT_EQ(step.code, RejectCode::auth_failed);
}

TEST(CtrlHandshake, FramesOutOfOrderFail) {
  const auto k = key_of("job key");
  ServerHandshake s(k, true, random_nonce());
  const Mac m{};
  EXPECT_EQ(s.on_frame(FrameType::proof, std::span<const std::byte>(m.data(), m.size())).what,
            HandshakeStep::What::failed);
  ClientHandshake c(k, true, hello_for(1));
  WelcomeMsg w;
  EXPECT_EQ(c.on_frame(FrameType::welcome, encode_welcome(w)).what, HandshakeStep::What::failed);
}

TEST(CtrlHandshake, CodecsRejectMalformedMessages) {
  HelloMsg h;
  EXPECT_NE(decode_hello(std::vector<std::byte>(75), h), "");
  auto hello = encode_hello(hello_for(1));
  store_le32(hello.data() + 4, 0x80);
  EXPECT_NE(decode_hello(hello, h).find("unknown flags"), std::string::npos);
  store_le32(hello.data() + 4, 0x1000);  // above the data-transport bits
  EXPECT_NE(decode_hello(hello, h).find("unknown flags"), std::string::npos);
  HelloMsg planed = hello_for(1);
  planed.flags = kHelloMayUseUds | (5u << kHelloPlaneShift);
  ASSERT_EQ(decode_hello(encode_hello(planed), h), "");
  EXPECT_EQ(hello_plane(h.flags), 5);
  EXPECT_EQ(hello_plane(kHelloMayUseUds), 0);
  hello = encode_hello(hello_for(1));
  store_le32(hello.data() + 4, kHelloUpgrade);  // upgrade without a ticket
  EXPECT_NE(decode_hello(hello, h).find("ticket"), std::string::npos);

  WelcomeMsg w, out;
  w.uds_path = "relative.sock";
  w.ticket = random_nonce();
  EXPECT_NE(decode_welcome(encode_welcome(w), out).find("absolute"), std::string::npos);
  w.uds_path = "/" + std::string(kMaxUdsPath, 'a');
  EXPECT_NE(decode_welcome(encode_welcome(w), out).find("socket path"), std::string::npos);

  RejectMsg r{RejectCode::busy, std::string("a\nb\x01") + "c"};
  RejectMsg got;
  EXPECT_EQ(decode_reject(encode_reject(r), got), "");
  EXPECT_EQ(got.reason, "a?b?c") << "control characters from the peer never reach a log";
  auto bad = encode_reject(r);
  bad[0] = std::byte{99};
  EXPECT_NE(decode_reject(bad, got), "");
}

TEST(CtrlHandshake, TheShorterHeartbeatWinsAndOffOnEitherSideMeansOff) {
  EXPECT_EQ(heartbeat_for(1000, 200), 200u);
  EXPECT_EQ(heartbeat_for(200, 1000), 200u);
  EXPECT_EQ(heartbeat_for(0, 1000), 0u);
  EXPECT_EQ(heartbeat_for(1000, 0), 0u);
}

}  // namespace
}  // namespace hmc::detail
