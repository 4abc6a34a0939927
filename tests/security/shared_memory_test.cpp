// Same-host shared memory stays this user's: UCX_TLS never includes SysV (whose segments UCX
// creates with mode 0660, open to the group), and the session buffer is a posix segment that
// another user cannot open.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "hmc/error.hpp"
#include "hmc/session.hpp"
#include "ucx/ucx_context.hpp"

namespace hmc {
namespace {

namespace fs = std::filesystem;

TEST(UcxTls, SysvLeavesEveryListAndTcpIsUsedOnlyWhereNamed) {
  const std::vector<std::string> here{"posix", "sysv", "cma", "self", "tcp"};
  EXPECT_EQ(detail::ucx_tls_setting("", here), "^sysv,tcp");
  EXPECT_EQ(detail::ucx_tls_setting("all", here), "^sysv,tcp");
  EXPECT_EQ(detail::ucx_tls_setting("shm", here), "posix,cma");
  EXPECT_EQ(detail::ucx_tls_setting("shm,tcp", here), "posix,cma,tcp");
  EXPECT_EQ(detail::ucx_tls_setting("posix,sysv,cma,tcp", here), "posix,cma,tcp");
  EXPECT_EQ(detail::ucx_tls_setting("mm,self", here), "posix,self");
  EXPECT_EQ(detail::ucx_tls_setting("^ud", here), "^ud,sysv,tcp");
  EXPECT_EQ(detail::ucx_tls_setting("^sysv,ud", here), "^sysv,ud,tcp");
  EXPECT_EQ(detail::ucx_tls_setting("^tcp", here), "^tcp,sysv");
  EXPECT_EQ(detail::ucx_tls_setting("tcp", here), "tcp");
  EXPECT_EQ(detail::ucx_tls_setting("sm", {"posix", "sysv", "cma", "xpmem", "knem"}), "posix,cma,xpmem,knem");
  EXPECT_THROW(detail::ucx_tls_setting("sysv", here), InvalidConfigError);
}

// The line of /proc/self/maps that holds `p`.
std::string mapping_of(const void* p) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream(line) >> std::hex >> lo >> dash >> hi;
    if (lo <= at && at < hi) return line;
  }
  return {};
}

std::vector<std::string> sysv_segments_of(pid_t pid) {
  std::vector<std::string> out;
  std::ifstream shm("/proc/sysvipc/shm");
  std::string line;
  std::getline(shm, line);  // header
  while (std::getline(shm, line)) {
    std::istringstream f(line);
    std::string key, id, perms, size, cpid;
    f >> key >> id >> perms >> size >> cpid;
    if (cpid == std::to_string(pid)) out.push_back(line);
  }
  return out;
}

TEST(SharedMemory, SessionBufferIsAPosixSegmentNoOtherUserCanOpen) {
  SessionOptions o;
  o.buffer_size = 4u << 20;
  o.ucx_tls = "shm";
  o.auth_key = "shared-memory-test-key";  // never the user's key file
  Session s(o);
  const std::string map = mapping_of(s.buffer().data());
  ASSERT_NE(map.find(" rw-s "), std::string::npos) << "the buffer is shared memory: " << map;
  EXPECT_EQ(map.find("SYSV"), std::string::npos) << map;
  const auto path_at = map.find("/dev/shm/");
  ASSERT_NE(path_at, std::string::npos) << map;
  EXPECT_TRUE(sysv_segments_of(::getpid()).empty()) << "a SysV segment: " << sysv_segments_of(::getpid()).front();

  // The segment is reachable only through this process's fds: find the one behind the mapping.
  const std::string name = map.substr(path_at, map.find(' ', path_at) - path_at);
  std::string fd_path;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = fs::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind(name, 0) == 0)
      fd_path = "/proc/" + std::to_string(::getpid()) + "/fd/" + e.path().filename().string();
  }
  ASSERT_FALSE(fd_path.empty()) << "no fd behind " << name;
  struct stat st {};
  ASSERT_EQ(::stat(fd_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u) << "segment mode " << std::oct << (st.st_mode & 0777);

  if (::geteuid() != 0) GTEST_SKIP() << "opening it as another user needs root (setresuid); not root here";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // nobody: not this user, not in its group.
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) ::_exit(3);
    const int rw = ::open(fd_path.c_str(), O_RDWR);
    const int ro = ::open(fd_path.c_str(), O_RDONLY);
    ::_exit(rw < 0 && ro < 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "another user opened the session buffer's segment (3: setresuid failed)";
}

}  // namespace
}  // namespace hmc
