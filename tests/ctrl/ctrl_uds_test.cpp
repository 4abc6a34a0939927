// Unix sockets stay private: a per-user 0700 directory, SO_PEERCRED, and clients that dial only the
// path an authenticated server named.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>

#include "child_process.hpp"
#include "ctrl_test_util.hpp"
#include "detail/uds_dir.hpp"
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
    o.auth_key = "uds test key";
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
  test::ChildProcess other(std::vector<std::string>{"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                                    "--clear-groups", "--inh-caps=+dac_override",
                                                    "--ambient-caps=+dac_override", "/usr/bin/python3", "-c", script,
                                                    path});
  const std::string line = other.read_line();
  if (line.empty() && other.wait() != 0) GTEST_SKIP() << "setpriv cannot drop to uid 65534 with CAP_DAC_OVERRIDE here";
  EXPECT_EQ(line, "EOF");
  EXPECT_TRUE(logs.has_error_containing("refused a Unix-socket peer of uid 65534"));
}

}  // namespace
}  // namespace hmc
