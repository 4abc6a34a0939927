#include "store/store_wire.hpp"

#include <algorithm>

#include "wire/byte_order.hpp"

namespace hmc::detail::store_wire {
namespace {

class Writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<std::byte>(v)); }
  void u32(std::uint32_t v) {
    const auto at = grow(4);
    store_le32(out_.data() + at, v);
  }
  void u64(std::uint64_t v) {
    const auto at = grow(8);
    store_le64(out_.data() + at, v);
  }
  void str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    const auto b = bytes_of(s);
    out_.insert(out_.end(), b.begin(), b.end());
  }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::size_t grow(std::size_t n) {
    out_.resize(out_.size() + n);
    return out_.size() - n;
  }
  std::vector<std::byte> out_;
};

// Reads fields in order; the first short or oversized field sets `why` and every later read fails.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  bool u8(std::uint8_t& v) {
    if (!need(1, "u8")) return false;
    v = std::to_integer<std::uint8_t>(in_[at_++]);
    return true;
  }
  bool u32(std::uint32_t& v) {
    if (!need(4, "u32")) return false;
    v = load_le32(in_.data() + at_);
    at_ += 4;
    return true;
  }
  bool u64(std::uint64_t& v) {
    if (!need(8, "u64")) return false;
    v = load_le64(in_.data() + at_);
    at_ += 8;
    return true;
  }
  bool str(std::string& s, std::size_t max, const char* what) {
    std::uint32_t n = 0;
    if (!u32(n)) return false;
    if (n > max) return fail(std::string(what) + " of " + std::to_string(n) + " bytes exceeds " + std::to_string(max));
    if (!need(n, what)) return false;
    s.assign(reinterpret_cast<const char*>(in_.data() + at_), n);
    at_ += n;
    return true;
  }
  bool fail(std::string why) {
    if (why_.empty()) why_ = std::move(why);
    return false;
  }
  std::string finish() {
    if (why_.empty() && at_ != in_.size()) why_ = std::to_string(in_.size() - at_) + " trailing bytes";
    return why_;
  }

 private:
  bool need(std::size_t n, const char* what) {
    if (!why_.empty()) return false;
    if (in_.size() - at_ < n) return fail(std::string("truncated ") + what);
    return true;
  }
  std::span<const std::byte> in_;
  std::size_t at_ = 0;
  std::string why_;
};

bool read_timeout(Reader& r, std::chrono::milliseconds& out) {
  std::uint64_t ms = 0;
  if (!r.u64(ms)) return false;
  if (ms > static_cast<std::uint64_t>(kMaxWait.count()))
    return r.fail("timeout of " + std::to_string(ms) + " ms exceeds a day");
  out = std::chrono::milliseconds(static_cast<std::int64_t>(ms));
  return true;
}

bool read_key(Reader& r, std::string& key, const Limits& limits) {
  if (!r.str(key, limits.max_key, "key")) return false;
  return !key.empty() || r.fail("empty key");
}

}  // namespace

std::array<std::byte, kHeaderSize> encode_header(const Header& h) {
  std::array<std::byte, kHeaderSize> out{};
  store_le32(out.data(), kMagic);
  out[4] = static_cast<std::byte>(h.type);
  store_le32(out.data() + 8, h.id);
  store_le32(out.data() + 12, h.length);
  return out;
}

std::string decode_header(std::span<const std::byte> bytes, std::uint32_t max_length, Header& out) {
  if (bytes.size() != kHeaderSize) return "header of " + std::to_string(bytes.size()) + " bytes";
  if (load_le32(bytes.data()) != kMagic) return "bad magic (not an HMC store peer)";
  const auto type = std::to_integer<std::uint8_t>(bytes[4]);
  if (type < static_cast<std::uint8_t>(FrameType::hello) || type > static_cast<std::uint8_t>(FrameType::reply))
    return "unknown frame type " + std::to_string(type);
  if (bytes[5] != std::byte{0} || load_le16(bytes.data() + 6) != 0) return "non-zero flags";
  out.type = static_cast<FrameType>(type);
  out.id = load_le32(bytes.data() + 8);
  out.length = load_le32(bytes.data() + 12);
  if (out.length > max_length)
    return "frame of " + std::to_string(out.length) + " bytes exceeds the maximum of " + std::to_string(max_length);
  return {};
}

std::vector<std::byte> encode_frame(FrameType type, std::uint32_t id, std::span<const std::byte> payload) {
  const auto h = encode_header(Header{type, id, static_cast<std::uint32_t>(payload.size())});
  // Sized once, then copied into: inserting after the header trips GCC 12's -O3 bounds warnings
  // (false positives).
  std::vector<std::byte> out(h.size() + payload.size());
  std::copy(payload.begin(), payload.end(), std::copy(h.begin(), h.end(), out.begin()));
  return out;
}

std::vector<std::byte> encode_request(const Request& r) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(r.op));
  switch (r.op) {
    case Op::set:
      w.str(r.key);
      w.str(r.value);
      break;
    case Op::get:
      w.str(r.key);
      w.u64(static_cast<std::uint64_t>(r.timeout.count()));
      break;
    case Op::wait:
    case Op::check:
      w.u32(static_cast<std::uint32_t>(r.keys.size()));
      for (const auto& k : r.keys) w.str(k);
      w.u64(static_cast<std::uint64_t>(r.timeout.count()));
      break;
    case Op::add:
      w.str(r.key);
      w.u64(static_cast<std::uint64_t>(r.delta));
      break;
    case Op::compare_set:
      w.str(r.key);
      w.str(r.expected);
      w.str(r.value);
      break;
    case Op::erase: w.str(r.key); break;
  }
  return w.take();
}

std::string decode_request(std::span<const std::byte> payload, const Limits& limits, Request& out) {
  Reader r(payload);
  std::uint8_t op = 0;
  if (!r.u8(op)) return r.finish();
  if (op < static_cast<std::uint8_t>(Op::set) || op > static_cast<std::uint8_t>(Op::check))
    return "unknown store operation " + std::to_string(op);
  out = Request{};
  out.op = static_cast<Op>(op);
  switch (out.op) {
    case Op::set: read_key(r, out.key, limits) && r.str(out.value, limits.max_value, "value"); break;
    case Op::get: read_key(r, out.key, limits) && read_timeout(r, out.timeout); break;
    case Op::wait:
    case Op::check: {
      std::uint32_t n = 0;
      if (!r.u32(n)) break;
      if (n == 0 || n > limits.max_keys) {
        r.fail(std::to_string(n) + " keys (1.." + std::to_string(limits.max_keys) + " allowed)");
        break;
      }
      out.keys.resize(n);
      for (auto& k : out.keys)
        if (!read_key(r, k, limits)) break;
      read_timeout(r, out.timeout);
      break;
    }
    case Op::add: {
      std::uint64_t d = 0;
      if (read_key(r, out.key, limits) && r.u64(d)) out.delta = static_cast<std::int64_t>(d);
      break;
    }
    case Op::compare_set:
      read_key(r, out.key, limits) && r.str(out.expected, limits.max_value, "expected value") &&
          r.str(out.value, limits.max_value, "value");
      break;
    case Op::erase: read_key(r, out.key, limits); break;
  }
  return r.finish();
}

std::vector<std::byte> encode_reply(const Reply& r) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(r.status));
  w.str(r.value);
  if (r.status == Status::SUCCESS) {
    w.u64(static_cast<std::uint64_t>(r.number));
    w.u8(r.flag ? 1 : 0);
  }
  return w.take();
}

std::string decode_reply(std::span<const std::byte> payload, const Limits& limits, Reply& out) {
  Reader r(payload);
  std::uint8_t status = 0;
  if (!r.u8(status)) return r.finish();
  if (status > static_cast<std::uint8_t>(Status::AUTH_FAILED)) return "unknown status " + std::to_string(status);
  out = Reply{};
  out.status = static_cast<Status>(status);
  if (!r.str(out.value, limits.max_value, "value")) return r.finish();
  if (out.status == Status::SUCCESS) {
    std::uint64_t number = 0;
    std::uint8_t flag = 0;
    if (r.u64(number) && r.u8(flag)) {
      if (flag > 1) r.fail("flag " + std::to_string(flag));
      out.number = static_cast<std::int64_t>(number);
      out.flag = flag == 1;
    }
  }
  return r.finish();
}

}  // namespace hmc::detail::store_wire
