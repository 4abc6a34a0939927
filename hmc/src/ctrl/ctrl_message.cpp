#include "hmc/ctrl_message.hpp"

#include "wire/byte_order.hpp"

namespace hmc {

CtrlMessage CtrlMessage::from_tag(std::uint64_t tag) {
  CtrlMessage m;
  m.kind_ = CtrlKind::tag;
  m.payload_.resize(8);
  detail::store_le64(m.payload_.data(), tag);
  return m;
}

CtrlMessage CtrlMessage::from_bytes(std::span<const std::byte> bytes) {
  CtrlMessage m;
  m.kind_ = CtrlKind::bytes;
  m.payload_.assign(bytes.begin(), bytes.end());
  return m;
}

CtrlMessage CtrlMessage::from_transport(std::span<const std::byte> bytes) {
  CtrlMessage m = from_bytes(bytes);
  m.kind_ = CtrlKind::transport;
  return m;
}

CtrlMessage CtrlMessage::from_wire(CtrlKind kind, std::vector<std::byte> payload) {
  CtrlMessage m;
  m.kind_ = kind;
  m.payload_ = std::move(payload);
  return m;
}

std::uint64_t CtrlMessage::tag() const {
  if (kind_ != CtrlKind::tag || payload_.size() != 8)
    throw ProtocolError("control message is " + std::to_string(payload_.size()) + " bytes of data, not a tag");
  return detail::load_le64(payload_.data());
}

}  // namespace hmc
