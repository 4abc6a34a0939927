#include "ctrl/uds_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "ctrl/ctrl_handshake.hpp"
#include "hmc/error.hpp"

namespace hmc::detail {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Private: a real directory (lstat: a symlink planted in its place does not count), ours, 0700.
std::string why_not_private(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return "cannot stat " + dir + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return dir + " is not a directory";
  if (st.st_uid != ::geteuid())
    return dir + " belongs to uid " + std::to_string(st.st_uid) + ", not this user (uid " +
           std::to_string(::geteuid()) + ")";
  if ((st.st_mode & 077) != 0) return dir + " is open to other users (mode " + std::to_string(st.st_mode & 0777) + ")";
  return {};
}

// A directory that may hold this user's private subdirectory: nobody else can rename or remove
// entries in it (ours or root's, and either not writable by others or sticky, like /tmp).
std::string why_not_safe_parent(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return "cannot stat " + dir + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return dir + " is not a directory";
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return dir + " belongs to uid " + std::to_string(st.st_uid) + ", not this user (uid " +
           std::to_string(::geteuid()) + ")";
  if ((st.st_mode & 022) != 0 && (st.st_mode & S_ISVTX) == 0)
    return dir + " is writable by others without the sticky bit";
  return {};
}

std::string user_subdir(const std::string& parent) {
  return (parent == "/" ? std::string() : parent) + "/hmc-" + std::to_string(::geteuid());
}

}  // namespace

std::string make_private_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return "cannot create " + dir + ": " + std::strerror(errno);
  return why_not_private(dir);
}

std::string default_uds_dir() {
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x != nullptr && *x == '/') return std::string(x) + "/hmc";
  return user_subdir("/tmp");
}

UdsLocation resolve_uds_location(const std::string& option, std::uint16_t port) {
  UdsLocation loc;
  loc.file = "hmc-ctrl-" + std::to_string(port) + ".sock";
  std::string dir = option.empty() ? default_uds_dir() : option;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st {};
  const bool exists = ::stat(dir.c_str(), &st) == 0;
  if (!option.empty() && (ends_with(dir, ".sock") || (exists && !S_ISDIR(st.st_mode)))) {
    const auto slash = dir.rfind('/');
    loc.file = slash == std::string::npos ? dir : dir.substr(slash + 1);
    dir = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
  }
  std::string why = make_private_dir(dir);
  if (!why.empty() && !option.empty()) {
    // A shared directory (the README passes /tmp) gets this user's own subdirectory.
    if (auto unsafe = why_not_safe_parent(dir); !unsafe.empty())
      throw InvalidConfigError("no private directory for the control socket: " + unsafe);
    dir = user_subdir(dir);
    why = make_private_dir(dir);
  }
  if (!why.empty()) throw InvalidConfigError("no private directory for the control socket: " + why);
  loc.dir = dir;
  if (loc.path().size() > kMaxUdsPath)
    throw InvalidConfigError("control socket path " + loc.path() + " is longer than " + std::to_string(kMaxUdsPath) +
                             " bytes");
  return loc;
}

}  // namespace hmc::detail
