#include "ucx/ucx_peer_info.hpp"

#include <cstring>
#include <fstream>

#include "detail/byte_order.hpp"

namespace hmc::detail {
namespace {

constexpr std::uint32_t kInfoMagic = 0x31584355;  // "UCX1"
constexpr std::size_t kMaxField = 1u << 20;        // worker addresses and rkeys are far smaller

class Writer {
 public:
  void u16(std::uint16_t v) { grow(2), store_le16(out_.data() + out_.size() - 2, v); }
  void u32(std::uint32_t v) { grow(4), store_le32(out_.data() + out_.size() - 4, v); }
  void u64(std::uint64_t v) { grow(8), store_le64(out_.data() + out_.size() - 8, v); }
  void blob(const void* p, std::size_t n) {
    u32(static_cast<std::uint32_t>(n));
    grow(n);
    if (n != 0) std::memcpy(out_.data() + out_.size() - n, p, n);
  }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  void grow(std::size_t n) { out_.resize(out_.size() + n); }
  std::vector<std::byte> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  bool u16(std::uint16_t& v) { return take(2) && (v = load_le16(at_), true); }
  bool u32(std::uint32_t& v) { return take(4) && (v = load_le32(at_), true); }
  bool u64(std::uint64_t& v) { return take(8) && (v = load_le64(at_), true); }
  template <class Out>
  bool blob(Out& out) {
    std::uint32_t n = 0;
    if (!u32(n) || n > kMaxField || !take(n)) return false;
    out.resize(n);
    if (n != 0) std::memcpy(out.data(), at_, n);
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  bool take(std::size_t n) {
    if (in_.size() - pos_ < n) return false;
    at_ = in_.data() + pos_;
    pos_ += n;
    return true;
  }
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
  const std::byte* at_ = nullptr;
};

}  // namespace

std::vector<std::byte> UcxPeerInfo::encode() const {
  Writer w;
  w.u32(kInfoMagic);
  w.u32(rank);
  w.u64(buffer_base);
  w.u64(buffer_size);
  w.u32(memory_type);
  w.blob(address_ip.data(), address_ip.size());
  w.u16(data_port);
  w.blob(host_id.data(), host_id.size());
  w.blob(worker_address.data(), worker_address.size());
  w.blob(rkey.data(), rkey.size());
  return w.take();
}

std::string UcxPeerInfo::decode(std::span<const std::byte> bytes, UcxPeerInfo& out) {
  Reader r(bytes);
  std::uint32_t magic = 0;
  if (!r.u32(magic) || magic != kInfoMagic) return "not a UCX peer-info message";
  if (!r.u32(out.rank) || !r.u64(out.buffer_base) || !r.u64(out.buffer_size) || !r.u32(out.memory_type) ||
      !r.blob(out.address_ip) || !r.u16(out.data_port) || !r.blob(out.host_id) || !r.blob(out.worker_address) || !r.blob(out.rkey))
    return "truncated UCX peer-info message";
  if (!r.done()) return "trailing bytes after the UCX peer-info message";
  if (out.worker_address.empty()) return "UCX peer-info without a worker address";
  return {};
}

std::string UcxPeerInfo::local_host_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

}  // namespace hmc::detail
