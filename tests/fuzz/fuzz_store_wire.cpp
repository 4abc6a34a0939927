// libFuzzer target: the embedded store's frames and requests/replies, the collectives' messages
// and base64 (etcd), all as a peer could send them.
// Input: byte 0 picks the decoder, the rest is what arrived. Checks: no crash or sanitizer report;
// whatever decodes re-encodes to exactly the bytes it came from (one canonical form, so two
// implementations can never read one message two ways); limits hold on what was accepted.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "store/base64.hpp"
#include "store/store_wire.hpp"
#include "world/world_message.hpp"

namespace wire = hmc::detail::store_wire;

namespace {

void same_or_abort(const std::vector<std::byte>& again, std::span<const std::byte> original) {
  if (again.size() != original.size() || std::memcmp(again.data(), original.data(), again.size()) != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  wire::Limits limits;
  limits.max_key = 64;  // small limits: the fuzzer reaches the edges
  limits.max_value = 256;
  limits.max_keys = 8;
  switch (data[0] % 5) {
    case 0: {  // a frame header, then (if it fits) its payload as a request
      wire::Header h;
      if (in.size() < wire::kHeaderSize) return 0;
      if (!wire::decode_header(in.first(wire::kHeaderSize), limits.max_frame(), h).empty()) return 0;
      if (h.length > limits.max_frame()) std::abort();
      const auto again = wire::encode_header(h);
      same_or_abort(std::vector<std::byte>(again.begin(), again.end()), in.first(wire::kHeaderSize));
      const auto rest = in.subspan(wire::kHeaderSize);
      wire::Request r;
      if (h.length <= rest.size() && wire::decode_request(rest.first(h.length), limits, r).empty())
        same_or_abort(wire::encode_request(r), rest.first(h.length));
      return 0;
    }
    case 1: {
      wire::Request r;
      if (!wire::decode_request(in, limits, r).empty()) return 0;
      if (r.key.size() > limits.max_key || r.value.size() > limits.max_value || r.keys.size() > limits.max_keys ||
          r.timeout > wire::kMaxWait)
        std::abort();
      same_or_abort(wire::encode_request(r), in);
      return 0;
    }
    case 2: {
      wire::Reply r;
      if (wire::decode_reply(in, limits, r).empty()) same_or_abort(wire::encode_reply(r), in);
      return 0;
    }
    case 3: {
      std::string why;
      std::span<const std::byte> payload;
      if (auto m = hmc::detail::decode_world_message(in, why, &payload))
        same_or_abort(hmc::detail::encode(*m, payload), in);
      return 0;
    }
    default: {
      const std::string text(reinterpret_cast<const char*>(in.data()), in.size());
      std::string out;
      if (hmc::detail::base64_decode(text, out) && hmc::detail::base64_encode(out) != text) std::abort();
      return 0;
    }
  }
}
