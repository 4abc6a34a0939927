// TLS on the control channel with a throw-away CA made by the test (openssl CLI): both sides
// verify, a certificate from another CA is a typed error without a hang, plaintext peers fail.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "../security/test_certs.hpp"
#include "ctrl_test_util.hpp"
#include "hmc/ctrl_channel.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
namespace asio = runtime::asio;

std::string certs_dir;

class CtrlTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_dir = test::make_temp_dir();
    ready = test::make_ca_and_node(certs_dir, "good") && test::make_ca_and_node(certs_dir, "evil");
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(certs_dir); }
  void SetUp() override {
    ASSERT_TRUE(ready) << "openssl could not make the test certificates";
    loop.start();
    dir = test::make_temp_dir();
  }
  void TearDown() override { std::filesystem::remove_all(dir); }

  // cert/key of `node`, trusting `ca`; tcp so that TLS is what carries the channel.
  CtrlOptions tls(const std::string& node, const std::string& ca, CtrlTransport t = CtrlTransport::tcp) {
    CtrlOptions o;
    o.transport = t;
    o.uds_dir = dir;
    o.auth_key = "the ctrl tls test key";
    o.hello_timeout = 3s;
    o.tls_cert = certs_dir + "/" + node + ".pem";
    o.tls_key = certs_dir + "/" + node + ".key";
    o.tls_ca = certs_dir + "/" + ca + "-ca.pem";
    return o;
  }
  CtrlOptions plain() {
    CtrlOptions o;
    o.transport = CtrlTransport::tcp;
    o.uds_dir = dir;
    o.auth_key = "the ctrl tls test key";
    return o;
  }

  static inline bool ready = false;
  runtime::EventLoop loop;
  std::string dir;
};

TEST_F(CtrlTlsTest, BothSidesVerifyAndMessagesFlowInOrder) {
  CtrlChannel server(loop, 0, tls("good", "good"));
  const auto port = server.listen("127.0.0.1", 0);
  CtrlChannel client(loop, 1, tls("good", "good"));
  EXPECT_EQ(client.async_connect("127.0.0.1", port, 5s, asio::use_future).get(), 0u);
  EXPECT_EQ(client.transport_of(0), "tls");
  EXPECT_EQ(server.transport_of(1), "tls");
  std::future<void> last;
  for (std::uint64_t i = 0; i < 5000; ++i) last = client.async_send(0, CtrlMessage::from_tag(i), asio::use_future);
  std::vector<std::byte> big(3u << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(i * 7);
  last = client.async_send(0, CtrlMessage::from_bytes(big), asio::use_future);
  last.get();
  for (std::uint64_t i = 0; i < 5000; ++i) ASSERT_EQ(server.async_recv(1, 5s, asio::use_future).get().tag(), i);
  const CtrlMessage m = server.async_recv(1, 5s, asio::use_future).get();
  EXPECT_TRUE(std::equal(big.begin(), big.end(), m.bytes().begin(), m.bytes().end()));
  server.async_send(1, CtrlMessage::from_tag(77), asio::use_future).get();
  EXPECT_EQ(client.async_recv(0, 5s, asio::use_future).get().tag(), 77u);
  client.close();
  EXPECT_THROW(server.async_recv(1, 5s, asio::use_future).get(), PeerLostError);
}

TEST_F(CtrlTlsTest, ACertificateFromAnotherCaIsAnAuthenticationErrorWithoutAHang) {
  CtrlChannel server(loop, 0, tls("good", "good"));
  const auto port = server.listen("127.0.0.1", 0);
  test::LogCapture logs;
  // The client's certificate is signed by a CA the server does not trust.
  CtrlChannel stranger(loop, 1, tls("evil", "good"));
  EXPECT_THROW(stranger.async_connect("127.0.0.1", port, 5s, asio::use_future).get(), AuthenticationError);
  // The client trusts another CA than the one that signed the server's certificate.
  CtrlChannel wary(loop, 2, tls("good", "evil"));
  EXPECT_THROW(wary.async_connect("127.0.0.1", port, 5s, asio::use_future).get(), AuthenticationError);
  EXPECT_TRUE(server.peers().empty());
  EXPECT_TRUE(logs.has_error_containing("TLS handshake"));
  CtrlChannel good(loop, 3, tls("good", "good"));
  EXPECT_EQ(good.async_connect("127.0.0.1", port, 5s, asio::use_future).get(), 0u);
}

// TLS on one side only: the side that fails says so and names the settings to check (the other
// side's log is on another host).
TEST_F(CtrlTlsTest, PlaintextAgainstTlsFailsEitherWaySayingWhichSideUsesTls) {
  test::LogCapture logs;
  CtrlChannel tls_server(loop, 0, tls("good", "good"));
  const auto tls_port = tls_server.listen("127.0.0.1", 0);
  CtrlChannel plain_client(loop, 1, plain());
  try {
    plain_client.async_connect("127.0.0.1", tls_port, 5s, asio::use_future).get();
    ADD_FAILURE() << "a plain-text client reached a TLS server";
  } catch (const AuthenticationError& e) {
    EXPECT_NE(std::string(e.what()).find("the server requires TLS and this side does not use it"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("HMC_TLS_CERT"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(logs.has_error_containing("the client spoke plain text"));

  CtrlChannel plain_server(loop, 0, plain());
  const auto plain_port = plain_server.listen("127.0.0.1", 0);
  CtrlChannel tls_client(loop, 1, tls("good", "good"));
  try {
    tls_client.async_connect("127.0.0.1", plain_port, 5s, asio::use_future).get();
    ADD_FAILURE() << "a TLS client reached a plain-text server";
  } catch (const AuthenticationError& e) {
    EXPECT_NE(std::string(e.what()).find("the server answered in plain text, not TLS"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("HMC_TLS_CERT"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(logs.has_error_containing("a TLS handshake instead of an HMC frame"));
  EXPECT_TRUE(tls_server.peers().empty());
  EXPECT_TRUE(plain_server.peers().empty());
}

TEST_F(CtrlTlsTest, TheKeyHandshakeStillRunsInsideTls) {
  CtrlChannel server(loop, 0, tls("good", "good"));
  const auto port = server.listen("127.0.0.1", 0);
  CtrlOptions o = tls("good", "good");
  o.auth_key = "another ctrl tls test key";
  CtrlChannel client(loop, 1, o);
  EXPECT_THROW(client.async_connect("127.0.0.1", port, 5s, asio::use_future).get(), AuthenticationError);
}

TEST_F(CtrlTlsTest, ASameHostPeerMovesToThePlaintextUnixSocket) {
  CtrlChannel server(loop, 0, tls("good", "good", CtrlTransport::automatic));
  const auto port = server.listen("127.0.0.1", 0);
  CtrlChannel client(loop, 1, tls("good", "good", CtrlTransport::automatic));
  client.async_connect("127.0.0.1", port, 5s, asio::use_future).get();
  EXPECT_EQ(client.transport_of(0), "uds");
  client.async_send(0, CtrlMessage::from_tag(5), asio::use_future).get();
  EXPECT_EQ(server.async_recv(1, 5s, asio::use_future).get().tag(), 5u);
}

TEST_F(CtrlTlsTest, IncompleteOrUnreadableTlsSettingsAreInvalidConfig) {
  CtrlOptions o = tls("good", "good");
  o.tls_ca.clear();
  EXPECT_THROW(CtrlChannel(loop, 0, o), InvalidConfigError);
  o = tls("good", "good");
  o.tls_key = certs_dir + "/missing.key";
  EXPECT_THROW(CtrlChannel(loop, 0, o), InvalidConfigError);
  o = tls("good", "good");
  o.tls_key = certs_dir + "/evil.key";  // not the key of good.pem
  EXPECT_THROW(CtrlChannel(loop, 0, o), InvalidConfigError);
}

TEST_F(CtrlTlsTest, TheEnvironmentNamesTheTlsFiles) {
  ::setenv("HMC_TLS_CERT", "/c.pem", 1);
  ::setenv("HMC_TLS_KEY", "/k.pem", 1);
  ::setenv("HMC_TLS_CA", "/ca.pem", 1);
  const CtrlOptions o = CtrlOptions::from_env();
  ::unsetenv("HMC_TLS_CERT");
  ::unsetenv("HMC_TLS_KEY");
  ::unsetenv("HMC_TLS_CA");
  EXPECT_EQ(o.tls_cert, "/c.pem");
  EXPECT_EQ(o.tls_key, "/k.pem");
  EXPECT_EQ(o.tls_ca, "/ca.pem");
}

}  // namespace
}  // namespace hmc
