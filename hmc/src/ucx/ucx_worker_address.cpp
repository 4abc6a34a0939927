#include "ucx/ucx_worker_address.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace hmc::detail {
namespace {

// The constants of UCX 1.13's address format (src/ucp/wireup/address.c) and its limits.
constexpr std::uint8_t kVersionMask = 0x0f;   // header: low 4 bits are the version, v1 == 0
constexpr std::uint8_t kFlagDebugInfo = 0x1;  // header flags (high 4 bits): a worker name follows
constexpr std::uint8_t kFlagClientId = 0x4;   // an 8-byte client id follows
constexpr std::uint8_t kNullResource = 0xff;  // an empty resource list
constexpr std::uint8_t kMdEmptyDev = 0x80;    // a device without ifaces
constexpr std::uint8_t kFlagLast = 0x80;      // last device / last iface / last ep address
constexpr std::uint8_t kDevNumPaths = 0x40;   // a number-of-paths byte follows
constexpr std::uint8_t kDevSysDevice = 0x20;  // a system-device byte follows
constexpr std::uint8_t kDevLenMask = 0x1f;
constexpr std::uint8_t kIfaceHasEpAddr = 0x40;  // ep addresses follow the iface address
constexpr std::uint8_t kIfaceLenMask = 0x3f;
constexpr std::size_t kIfaceAttrSize = 16;  // v1 packed attributes: 3 floats and a uint32
constexpr unsigned kMaxResources = 128;     // UCP_MAX_RESOURCES: UCX's unpacked list holds this many
constexpr unsigned kMaxLanes = 6;           // UCP_MAX_LANES: ep addresses per iface, lane indices
constexpr unsigned kMaxDevices = 64;        // device indices stay within UCX's 64-bit device maps
// The posix shared-memory transport (tl_name_csum = ucs_crc16_string("posix")) reads its iface
// address as a segment id whose flags say how to open the segment (uct/sm/mm/posix/mm_posix.c).
constexpr std::uint16_t kPosixCsum = 0xd3a7;
constexpr std::uint64_t kPosixProcfs = 1ull << 63;   // /proc/<pid>/fd/<fd>: what our peers send
constexpr std::uint64_t kPosixShmOpen = 1ull << 62;  // shm_open of a name made from the id
constexpr std::uint64_t kPosixPidNs = 1ull << 60;    // an 8-byte PID namespace follows the id
// UCP hands a transport NULL for an empty device or iface address; these transports read theirs
// unconditionally (the zero padding covers a short one, nothing covers NULL).
struct KnownTransport {
  std::uint16_t csum;  // ucs_crc16_string of the name
  bool reads_device_address;
};
constexpr KnownTransport kKnownTransports[] = {
    {0x7563, false},  // self
    {kPosixCsum, true},
    {0x8b47, true},  // cma
    {0x19cf, true},  // tcp
};

class Walker {
 public:
  explicit Walker(std::span<const std::byte> bytes) : bytes_(bytes) {}
  bool byte(std::uint8_t& out) {
    if (at_ >= bytes_.size()) return false;
    out = static_cast<std::uint8_t>(bytes_[at_++]);
    return true;
  }
  bool skip(std::size_t n) {
    if (bytes_.size() - at_ < n) return false;
    at_ += n;
    return true;
  }
  bool peek(std::uint8_t& out) const {
    if (at_ >= bytes_.size()) return false;
    out = static_cast<std::uint8_t>(bytes_[at_]);
    return true;
  }
  const std::byte* here() const { return bytes_.data() + at_; }
  std::size_t at() const { return at_; }
  bool done() const { return at_ == bytes_.size(); }

 private:
  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
};

std::string bad(const char* what, std::size_t at) { return what + std::string(" at byte ") + std::to_string(at); }

float float_at(const std::byte* p) {
  float f = 0;
  std::memcpy(&f, p, sizeof f);  // UCX packs the host's float as is (both ends little-endian)
  return f;
}

// Walks the header up to the resource list; empty string when it is well-formed.
std::string walk_header(Walker& w) {
  std::uint8_t header = 0;
  if (!w.byte(header)) return bad("no header", 0);
  // Any other version makes UCX assert (v2 is never packed: UcxContext pins ADDRESS_VERSION=v1).
  if ((header & kVersionMask) != 0) return bad("not address version 1", 0);
  const std::uint8_t flags = header >> 4;
  // A v1 address always carries the worker's uuid (ucp_ep_create unpacks it whatever the flags say).
  if (!w.skip(8)) return bad("truncated worker uuid", w.at());
  if ((flags & kFlagClientId) != 0 && !w.skip(8)) return bad("truncated client id", w.at());
  if ((flags & kFlagDebugInfo) != 0) {
    std::uint8_t name_len = 0;
    if (!w.byte(name_len) || !w.skip(name_len)) return bad("truncated worker name", w.at());
  }
  std::uint8_t first = 0;
  if (!w.peek(first)) return bad("truncated before the resource list", w.at());
  return {};
}

}  // namespace

bool address_has_transports(std::span<const std::byte> address) {
  Walker w(address);
  std::uint8_t first = 0;
  return walk_header(w).empty() && w.peek(first) && first != kNullResource;
}

std::string check_worker_address(std::span<const std::byte> address) {
  Walker w(address);
  if (std::string why = walk_header(w); !why.empty()) return why;
  std::uint8_t first = 0;
  w.peek(first);
  if (first == kNullResource) {
    w.skip(1);
    return w.done() ? std::string() : bad("trailing bytes after an empty resource list", w.at());
  }
  unsigned devices = 0, ifaces = 0;
  for (bool last_dev = false; !last_dev;) {
    if (++devices > kMaxDevices) return bad("more than 64 devices", w.at());
    std::uint8_t md = 0, dev = 0;
    if (!w.byte(md) || !w.byte(dev)) return bad("truncated device header", w.at());
    last_dev = (dev & kFlagLast) != 0;
    if ((dev & kDevNumPaths) != 0) {
      std::uint8_t paths = 0;
      if (!w.byte(paths)) return bad("truncated number of paths", w.at());
      if (paths == 0) return bad("zero paths (UCX divides bandwidth by it)", w.at() - 1);
    }
    std::uint8_t sys_dev = 0;
    if ((dev & kDevSysDevice) != 0 && !w.byte(sys_dev)) return bad("truncated system device", w.at());
    const std::size_t dev_len = dev & kDevLenMask;
    if (!w.skip(dev_len)) return bad("truncated device address", w.at());
    if ((md & kMdEmptyDev) != 0) continue;
    for (bool last_iface = false; !last_iface;) {
      if (++ifaces > kMaxResources) return bad("more than 128 interfaces", w.at());
      std::uint8_t csum_lo = 0, csum_hi = 0;
      if (!w.byte(csum_lo) || !w.byte(csum_hi)) return bad("truncated transport name checksum", w.at());
      const auto csum = static_cast<std::uint16_t>(csum_lo | (csum_hi << 8));
      const std::size_t attr_at = w.at();
      const std::byte* attr = w.here();
      if (!w.skip(kIfaceAttrSize)) return bad("truncated interface attributes", attr_at);
      // Not-a-number or negative costs reach UCX's lane selection, which asserts on them.
      const float overhead = float_at(attr), bandwidth = float_at(attr + 4), lat_ovh = float_at(attr + 8);
      if (!std::isfinite(overhead) || overhead < 0) return bad("bad interface overhead", attr_at);
      // Negative is a pre-1.12 peer's legacy value; ours never send one.
      if (!std::isfinite(bandwidth) || bandwidth <= 0) return bad("bad interface bandwidth", attr_at + 4);
      if (!std::isfinite(lat_ovh) || lat_ovh < 0) return bad("bad interface latency", attr_at + 8);
      std::uint8_t iface = 0;
      if (!w.byte(iface)) return bad("truncated interface address length", w.at());
      last_iface = (iface & kFlagLast) != 0;
      const std::size_t iface_at = w.at();
      const std::byte* iface_addr = w.here();
      const std::size_t iface_len = iface & kIfaceLenMask;
      if (!w.skip(iface_len)) return bad("truncated interface address", w.at());
      for (const KnownTransport& t : kKnownTransports) {
        if (t.csum != csum) continue;
        if (iface_len == 0) return bad("empty interface address", iface_at);
        if (t.reads_device_address && dev_len == 0) return bad("interface on a device without an address", iface_at);
      }
      if (csum == kPosixCsum) {
        // Neither flag makes UCX open a directory named by the address (absent: it asserts).
        std::uint64_t seg_id = 0;
        if (iface_len < sizeof seg_id) return bad("posix interface address too short", iface_at);
        std::memcpy(&seg_id, iface_addr, sizeof seg_id);
        if ((seg_id & (kPosixProcfs | kPosixShmOpen)) == 0)
          return bad("posix segment neither procfs nor shm_open", iface_at);
        if ((seg_id & kPosixPidNs) != 0 && iface_len < 2 * sizeof seg_id)
          return bad("posix interface address without its PID namespace", iface_at);
      }
      if ((iface & kIfaceHasEpAddr) == 0) continue;
      unsigned eps = 0;
      for (bool last_ep = false; !last_ep;) {
        if (++eps > kMaxLanes) return bad("more than 6 endpoint addresses", w.at());
        std::uint8_t ep_len = 0, lane = 0;
        if (!w.byte(ep_len) || !w.skip(ep_len)) return bad("truncated endpoint address", w.at());
        if (!w.byte(lane)) return bad("truncated lane", w.at());
        if ((lane & kIfaceLenMask) >= kMaxLanes) return bad("lane index over 5", w.at() - 1);
        last_ep = (lane & kFlagLast) != 0;
      }
    }
  }
  return w.done() ? std::string() : bad("trailing bytes", w.at());
}

}  // namespace hmc::detail
