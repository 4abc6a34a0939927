#pragma once
// One control-channel message: a u64 tag or a byte payload (which carries trivially copyable structs).
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "hmc/error.hpp"

namespace hmc {

// transport: HMC's own bootstrap messages for the data plane, handed to CtrlHandlers::on_transport.
enum class CtrlKind : std::uint8_t { tag = 3, bytes = 4, transport = 6 };

class CtrlMessage {
 public:
  CtrlMessage() = default;

  static CtrlMessage from_tag(std::uint64_t tag);
  static CtrlMessage from_bytes(std::span<const std::byte> bytes);
  static CtrlMessage from_transport(std::span<const std::byte> bytes);
  template <class T>
  static CtrlMessage from_struct(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "control structs must be trivially copyable");
    return from_bytes(std::as_bytes(std::span<const T, 1>(&value, 1)));
  }
  // Used by the frame decoder: takes ownership of a received payload.
  static CtrlMessage from_wire(CtrlKind kind, std::vector<std::byte> payload);

  CtrlKind kind() const noexcept { return kind_; }
  std::span<const std::byte> bytes() const noexcept { return payload_; }

  // The tag value; ProtocolError when the message is not a tag.
  std::uint64_t tag() const;

  // The payload as a T; ProtocolError when the sizes differ.
  template <class T>
  T as() const {
    static_assert(std::is_trivially_copyable_v<T>, "control structs must be trivially copyable");
    if (payload_.size() != sizeof(T))
      throw ProtocolError("control message of " + std::to_string(payload_.size()) + " bytes read as a struct of " +
                          std::to_string(sizeof(T)));
    T out;
    std::memcpy(&out, payload_.data(), sizeof(T));
    return out;
  }

 private:
  CtrlKind kind_ = CtrlKind::bytes;
  std::vector<std::byte> payload_;
};

}  // namespace hmc
