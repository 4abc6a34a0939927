// Frame codec: round trip and every validation rule.
#include <gtest/gtest.h>

#include "detail/byte_order.hpp"
#include "detail/ctrl_frame.hpp"

namespace hmc::detail {
namespace {

TEST(CtrlFrame, HeaderRoundTripsInLittleEndian) {
  FrameHeader h;
  h.type = FrameType::bytes;
  h.flags = 0x0102;
  h.length = 0x01020304;
  const auto b = encode_header(h);
  EXPECT_EQ(std::to_integer<int>(b[0]), 'H');
  EXPECT_EQ(std::to_integer<int>(b[3]), '1');
  EXPECT_EQ(std::to_integer<int>(b[8]), 0x04);  // least significant byte first
  FrameHeader out;
  EXPECT_EQ(decode_header(b, 0xffffffff, out), "");
  EXPECT_EQ(out.type, FrameType::bytes);
  EXPECT_EQ(out.flags, 0x0102);
  EXPECT_EQ(out.length, 0x01020304u);
}

TEST(CtrlFrame, RejectsBadMagic) {
  auto b = encode_header(FrameHeader{});
  b[0] = std::byte{'X'};
  FrameHeader out;
  EXPECT_NE(decode_header(b, 1024, out).find("bad magic"), std::string::npos);
}

TEST(CtrlFrame, RejectsUnknownVersion) {
  auto b = encode_header(FrameHeader{});
  b[4] = std::byte{9};
  FrameHeader out;
  EXPECT_NE(decode_header(b, 1024, out).find("version"), std::string::npos);
}

TEST(CtrlFrame, RejectsUnknownType) {
  auto b = encode_header(FrameHeader{});
  b[5] = std::byte{77};
  FrameHeader out;
  EXPECT_NE(decode_header(b, 1024, out).find("type"), std::string::npos);
}

TEST(CtrlFrame, RejectsLengthOverTheMaximum) {
  FrameHeader h;
  h.length = 1025;
  FrameHeader out;
  EXPECT_NE(decode_header(encode_header(h), 1024, out).find("exceeds"), std::string::npos);
}

TEST(CtrlFrame, RejectsTagFrameOfWrongSize) {
  FrameHeader h;
  h.type = FrameType::tag;
  h.length = 4;
  FrameHeader out;
  EXPECT_NE(decode_header(encode_header(h), 1024, out).find("tag frame"), std::string::npos);
}

TEST(CtrlFrame, RejectsNonZeroReservedBytes) {
  auto b = encode_header(FrameHeader{});
  b[15] = std::byte{1};
  FrameHeader out;
  EXPECT_NE(decode_header(b, 1024, out).find("reserved"), std::string::npos);
}

TEST(CtrlFrame, WholeFrameCarriesThePayload) {
  const std::byte payload[3] = {std::byte{1}, std::byte{2}, std::byte{3}};
  const auto f = encode_frame(FrameType::bytes, payload, 3);
  ASSERT_EQ(f.size(), kFrameHeaderSize + 3);
  EXPECT_EQ(load_le32(f.data() + 8), 3u);
  EXPECT_EQ(f[kFrameHeaderSize + 2], std::byte{3});
}

}  // namespace
}  // namespace hmc::detail
