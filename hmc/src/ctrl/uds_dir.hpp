#pragma once
// Where a listener's Unix socket lives: always in a directory only this user can enter.
#include <cstdint>
#include <string>

namespace hmc::detail {

struct UdsLocation {
  std::string dir;   // verified: a directory (not a link) owned by this user, mode 0700
  std::string file;  // socket file name inside dir
  std::string path() const { return dir + "/" + file; }
};

// `option` is CtrlOptions::uds_dir: empty (the per-user default), a directory, or a full socket
// path (ends in ".sock" or names an existing non-directory). A directory that is not private (such
// as /tmp) gets a private "hmc-<uid>" subdirectory, created with mode 0700. Throws
// InvalidConfigError naming the reason when no private directory can be had (e.g. someone else
// owns it or it is open to others).
UdsLocation resolve_uds_location(const std::string& option, std::uint16_t port);

// The default directory: $XDG_RUNTIME_DIR/hmc when XDG_RUNTIME_DIR is set, else /tmp/hmc-<uid>.
std::string default_uds_dir();

// Creates `dir` (mode 0700) if missing, then checks it: empty result when private, else the reason.
std::string make_private_dir(const std::string& dir);

}  // namespace hmc::detail
