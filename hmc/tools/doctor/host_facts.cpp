#include "host_facts.hpp"

#include <net/if.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <ucp/api/ucp.h>

namespace hmc::doctor {

namespace fs = std::filesystem;

namespace {

// Entry names of a directory, sorted as strings (Python's sorted(os.listdir(...))); empty if unreadable.
std::vector<std::string> sorted_names(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

bool is_dir(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::string strip(std::string text) {
  const char* space = " \t\n\r\f\v";
  text.erase(0, std::min(text.find_first_not_of(space), text.size()));
  text.erase(text.find_last_not_of(space) + 1);
  return text;
}

// $HOME, else the password database's home, without trailing slashes (os.path.expanduser("~")).
std::string home_directory() {
  std::string home = "~";
  if (const char* env = std::getenv("HOME"); env != nullptr) home = env;
  else if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_dir != nullptr) home = pw->pw_dir;
  while (!home.empty() && home.back() == '/') home.pop_back();
  return home;
}

}  // namespace

std::string ucx_version() { return ucp_get_version_string(); }

std::vector<std::string> interface_names() {
  std::vector<std::string> names;
  struct if_nameindex* list = ::if_nameindex();
  if (list == nullptr) return names;
  for (const struct if_nameindex* it = list; it->if_index != 0 && it->if_name != nullptr; ++it)
    names.emplace_back(it->if_name);
  ::if_freenameindex(list);
  return names;
}

std::vector<RdmaDevice> rdma_devices() {
  std::vector<RdmaDevice> devices;
  if (!is_dir(kRdmaSysfs)) return devices;
  for (const auto& name : sorted_names(kRdmaSysfs)) {
    RdmaDevice device{name, {}};
    const fs::path ports = fs::path(kRdmaSysfs) / name / "ports";
    for (const auto& port : is_dir(ports) ? sorted_names(ports) : std::vector<std::string>{}) {
      // Port directories are numbers; anything else is not a port.
      if (port.empty() || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
          port.size() > 9)
        continue;
      std::ifstream state_file(ports / port / "state");
      std::stringstream state;
      state << state_file.rdbuf();
      device.ports.emplace_back(std::stoi(port), state_file ? strip(state.str()) : "unknown");
    }
    devices.push_back(std::move(device));
  }
  return devices;
}

KeyFacts auth_key() {
  KeyFacts facts;
  if (const char* key = std::getenv("HMC_AUTH_KEY"); key != nullptr && *key != '\0') {
    facts.info = {{"source", "HMC_AUTH_KEY"}};
    return facts;
  }
  const char* file = std::getenv("HMC_AUTH_KEY_FILE");
  const std::string path = file != nullptr && *file != '\0' ? file : home_directory() + "/.hmc/auth_key";
  facts.info = {{"source", "file"}, {"path", path}};
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      facts.info.emplace_back("state", "missing: the first session creates it (mode 0600)");
    } else {
      facts.info.emplace_back("state", std::generic_category().message(err));
      facts.problem = "key file " + path + " cannot be examined: " + std::generic_category().message(err);
    }
    return facts;
  }
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  facts.info.emplace_back("mode", mode);
  if (!S_ISREG(st.st_mode)) {
    facts.problem = "key file " + path + " is not a regular file";
  } else if ((st.st_mode & 077) != 0 || st.st_uid != ::geteuid()) {
    facts.problem =
        "key file " + path + " has mode " + mode + " or another owner: sessions refuse it (chmod 600 " + path + ")";
  }
  return facts;
}

}  // namespace hmc::doctor
