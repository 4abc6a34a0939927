#include "ctrl/local_address.hpp"

#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstring>

#include "hmc/runtime/asio.hpp"

namespace hmc::detail {

bool is_local_address(const std::string& host) {
  if (host == "localhost") return true;
  runtime::error_code ec;
  const auto addr = runtime::asio::ip::make_address(host, ec);
  if (ec) return false;
  if (addr.is_loopback() || addr.is_unspecified()) return true;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET && addr.is_v4()) {
      sockaddr_in sin{};
      std::memcpy(&sin, i->ifa_addr, sizeof sin);
      found = addr.to_v4().to_uint() == ntohl(sin.sin_addr.s_addr);
    } else if (i->ifa_addr->sa_family == AF_INET6 && addr.is_v6()) {
      sockaddr_in6 sin6{};
      std::memcpy(&sin6, i->ifa_addr, sizeof sin6);
      found = std::memcmp(addr.to_v6().to_bytes().data(), sin6.sin6_addr.s6_addr, 16) == 0;
    }
  }
  ::freeifaddrs(list);
  return found;
}

}  // namespace hmc::detail
