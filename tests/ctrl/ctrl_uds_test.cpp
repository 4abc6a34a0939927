// Unix sockets stay private: a per-user 0700 directory, SO_PEERCRED, and clients that dial only the
// path an authenticated server named.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "child_process.hpp"
#include "ctrl/uds_dir.hpp"
#include "ctrl_test_util.hpp"
#include "hmc/ctrl_channel.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
namespace asio = runtime::asio;
namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;

class CtrlUdsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loop.start();
    dir = test::make_temp_dir();
  }
  void TearDown() override { fs::remove_all(dir); }
  CtrlOptions opts(const std::string& uds_dir, CtrlTransport t = CtrlTransport::automatic) {
    CtrlOptions o;
    o.transport = t;
    o.uds_dir = uds_dir;
    o.auth_key = "the ctrl uds test key";
    return o;
  }
  std::string connect_transport(std::uint16_t port) {
    CtrlChannel c(loop, 1, opts(dir));
    c.async_connect("127.0.0.1", port, 5s, asio::use_future).get();
    return c.transport_of(0);
  }
  static unsigned mode_of(const std::string& path) {
    struct stat st {};
    ::lstat(path.c_str(), &st);
    return st.st_mode & 0777;
  }

  runtime::EventLoop loop;
  std::string dir;
};

TEST_F(CtrlUdsTest, ASocketPlantedAtTheOldPathIsNeverDialled) {
  CtrlChannel server(loop, 0, opts(dir + "/private"));
  const auto port = server.listen("127.0.0.1", 0);
  // Before: clients dialled /tmp/hmc-ctrl-<port>.sock (or <their own uds_dir>/...) if it existed.
  const std::string planted = "/tmp/hmc-ctrl-" + std::to_string(port) + ".sock";
  asio::io_context io;
  ::unlink(planted.c_str());
  asio::local::stream_protocol::acceptor trap(io, asio::local::stream_protocol::endpoint(planted));
  trap.non_blocking(true);
  const std::string planted_in_dir = dir + "/hmc-ctrl-" + std::to_string(port) + ".sock";
  asio::local::stream_protocol::acceptor trap2(io, asio::local::stream_protocol::endpoint(planted_in_dir));
  trap2.non_blocking(true);
  EXPECT_EQ(connect_transport(port), "uds");
  runtime::error_code ec;
  asio::local::stream_protocol::socket s(io);
  trap.accept(s, ec);
  EXPECT_EQ(ec, asio::error::would_block) << "the client dialled the planted socket " << planted;
  trap2.accept(s, ec);
  EXPECT_EQ(ec, asio::error::would_block) << "the client dialled the planted socket " << planted_in_dir;
  EXPECT_EQ(server.uds_path().rfind(dir + "/private/", 0), 0u) << server.uds_path();
  ::unlink(planted.c_str());
}

TEST_F(CtrlUdsTest, TheSocketDirectoryIsCreatedPrivate) {
  CtrlChannel server(loop, 0, opts(dir + "/new"));
  server.listen("127.0.0.1", 0);
  EXPECT_EQ(mode_of(dir + "/new"), 0700u);
  EXPECT_EQ(mode_of(server.uds_path()), 0600u);
}

TEST_F(CtrlUdsTest, ADirectoryOfAnotherUserIsRefused) {
  const std::string theirs = dir + "/theirs";
  fs::create_directory(theirs);
  ::chmod(theirs.c_str(), 0700);
  ASSERT_EQ(::chown(theirs.c_str(), kNobody, kNobody), 0);
  // With a shared parent that is open to others, even the hmc-<uid> fallback must not be trusted.
  EXPECT_THROW(detail::resolve_uds_location(theirs, 1), InvalidConfigError);
  CtrlChannel strict(loop, 0, opts(theirs, CtrlTransport::uds));
  EXPECT_THROW(strict.listen("127.0.0.1", 0), InvalidConfigError);
  test::LogCapture logs;
  CtrlChannel lenient(loop, 0, opts(theirs));
  const auto port = lenient.listen("127.0.0.1", 0);
  EXPECT_EQ(lenient.uds_path(), "");
  EXPECT_TRUE(logs.has_line_containing("belongs to uid 65534"));
  EXPECT_EQ(connect_transport(port), "tcp");
}

TEST_F(CtrlUdsTest, ADirectoryOpenToOthersGetsAPrivateSubdirectoryLikeTmp) {
  const std::string shared = dir + "/shared";
  fs::create_directory(shared);
  ::chmod(shared.c_str(), 01777);
  CtrlChannel server(loop, 0, opts(shared));
  const auto port = server.listen("127.0.0.1", 0);
  const std::string mine = shared + "/hmc-" + std::to_string(::geteuid());
  EXPECT_EQ(server.uds_path(), mine + "/hmc-ctrl-" + std::to_string(port) + ".sock");
  EXPECT_EQ(mode_of(mine), 0700u);
  EXPECT_EQ(connect_transport(port), "uds");
  // Someone got there first with an open hmc-<uid>: refused, not used.
  const std::string other = dir + "/other";
  fs::create_directory(other);
  ::chmod(other.c_str(), 01777);
  const std::string planted = other + "/hmc-" + std::to_string(::geteuid());
  fs::create_directory(planted);
  ::chmod(planted.c_str(), 0777);
  EXPECT_THROW(detail::resolve_uds_location(other, 1), InvalidConfigError);
}

TEST_F(CtrlUdsTest, AFullSocketPathIsAccepted) {
  const std::string path = dir + "/my-ctrl.sock";
  CtrlChannel server(loop, 0, opts(path));
  const auto port = server.listen("127.0.0.1", 0);
  EXPECT_EQ(server.uds_path(), path);
  EXPECT_EQ(connect_transport(port), "uds");
  server.stop_listening();
  EXPECT_FALSE(fs::exists(path)) << "stop_listening removes the socket file";
}

TEST_F(CtrlUdsTest, TheDefaultDirectoryIsPerUserUnderXdgRuntimeDir) {
  ::setenv("XDG_RUNTIME_DIR", dir.c_str(), 1);
  CtrlChannel server(loop, 0, opts(""));
  const auto port = server.listen("127.0.0.1", 0);
  ::unsetenv("XDG_RUNTIME_DIR");
  EXPECT_EQ(server.uds_path(), dir + "/hmc/hmc-ctrl-" + std::to_string(port) + ".sock");
  EXPECT_EQ(mode_of(dir + "/hmc"), 0700u);
}

TEST_F(CtrlUdsTest, APeerOfAnotherUidIsRefusedBySoPeercred) {
  CtrlChannel server(loop, 0, opts(dir + "/p"));
  server.listen("127.0.0.1", 0);
  const std::string path = server.uds_path();
  // Another uid that can still reach the socket (CAP_DAC_OVERRIDE passes the 0700 directory):
  // only SO_PEERCRED stands in its way.
  const std::string script = "import socket,sys\n"
                             "s=socket.socket(socket.AF_UNIX)\n"
                             "s.connect(sys.argv[1])\n"
                             "s.settimeout(5)\n"
                             "print('EOF' if s.recv(100)==b'' else 'DATA', flush=True)\n";
  test::LogCapture logs;
  test::ChildProcess other(std::vector<std::string>{
      "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=+dac_override",
      "--ambient-caps=+dac_override", "/usr/bin/python3", "-c", script, path});
  const std::string line = other.read_line();
  if (line.empty() && other.wait() != 0) GTEST_SKIP() << "setpriv cannot drop to uid 65534 with CAP_DAC_OVERRIDE here";
  EXPECT_EQ(line, "EOF");
  EXPECT_TRUE(logs.has_error_containing("refused a Unix-socket peer of uid 65534"));
}

TEST_F(CtrlUdsTest, AClientRefusesAUnixSocketOfAnotherUidEvenWhenTheServerNamesIt) {
  // A server that holds the key names a socket owned by uid 65534: the client's SO_PEERCRED check
  // refuses it before sending a byte, says STAY and keeps the TCP connection.
  const std::string sockdir = dir + "/foreign";
  ::chmod(dir.c_str(), 0711);  // uid 65534 may pass through to its own directory
  fs::create_directory(sockdir);
  ::chmod(sockdir.c_str(), 0777);
  const std::string path = sockdir + "/s.sock";
  const std::string script = "import socket,sys\n"
                             "s=socket.socket(socket.AF_UNIX)\n"
                             "s.bind(sys.argv[1]); s.listen()\n"
                             "print('READY', flush=True)\n"
                             "c,_=s.accept(); c.settimeout(5)\n"
                             "print('GOT', len(c.recv(100)), flush=True)\n";
  test::ChildProcess listener(std::vector<std::string>{"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                                       "--clear-groups", "/usr/bin/python3", "-c", script, path});
  if (listener.read_line() != "READY") GTEST_SKIP() << "setpriv cannot run a listener as uid 65534 here";

  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 1), 0);
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  const auto key = test::key_bytes("the ctrl uds test key");
  std::promise<detail::FrameType> after_welcome;
  std::thread fake_server([&] {
    test::RawSocket s = test::RawSocket::adopt(::accept(lfd, nullptr, nullptr));
    detail::ServerHandshake hs(key, true, detail::random_nonce());
    detail::Frame f;
    while (s.read_frame(f)) {
      auto step = hs.on_frame(f.header.type, f.payload);
      if (step.what == detail::HandshakeStep::What::reply) {
        s.send(step.reply);
        continue;
      }
      if (step.what == detail::HandshakeStep::What::verified) {
        detail::WelcomeMsg w;
        w.rank = hs.hello().rank;
        w.ticket = detail::random_nonce();
        w.uds_path = path;
        s.send(hs.welcome(w));
        s.read_frame(f);
        after_welcome.set_value(f.header.type);
        std::this_thread::sleep_for(500ms);  // the client must find its connection still open
        return;
      }
      break;
    }
    after_welcome.set_value(detail::FrameType::reject);
  });
  test::LogCapture logs;
  CtrlChannel c(loop, 1, opts(dir));
  EXPECT_EQ(c.async_connect("127.0.0.1", ntohs(a.sin_port), 5s, asio::use_future).get(), 0u);
  EXPECT_EQ(c.transport_of(0), "tcp");
  EXPECT_EQ(after_welcome.get_future().get(), detail::FrameType::stay);
  EXPECT_TRUE(logs.has_line_containing("its owner is uid 65534"));
  EXPECT_EQ(listener.read_line(), "GOT 0") << "the client sent bytes to a socket of another uid";
  fake_server.join();
  ::close(lfd);
}

}  // namespace
}  // namespace hmc
