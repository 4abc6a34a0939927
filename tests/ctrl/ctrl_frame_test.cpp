// Frame codec and incremental decoder: round trip and every validation rule.
#include <gtest/gtest.h>

#include <numeric>

#include "ctrl/ctrl_frame.hpp"
#include "wire/byte_order.hpp"

namespace hmc::detail {
namespace {

TEST(CtrlFrame, HeaderRoundTripsInLittleEndian) {
  FrameHeader h;
  h.type = FrameType::bytes;
  h.length = 0x01020304;
  const auto b = encode_header(h);
  EXPECT_EQ(std::to_integer<int>(b[0]), 'H');
  EXPECT_EQ(std::to_integer<int>(b[3]), '1');
  EXPECT_EQ(std::to_integer<int>(b[8]), 0x04);  // least significant byte first
  FrameHeader out;
  EXPECT_EQ(decode_header(b, 0xffffffff, out), "");
  EXPECT_EQ(out.type, FrameType::bytes);
  EXPECT_EQ(out.length, 0x01020304u);
}

TEST(CtrlFrame, RejectsNonZeroFlags) {
  FrameHeader h;
  h.flags = 1;
  FrameHeader out;
  EXPECT_NE(decode_header(encode_header(h), 1024, out).find("flags"), std::string::npos);
}

TEST(CtrlFrame, RejectsTheOldProtocolVersion) {
  auto b = encode_header(FrameHeader{});
  b[4] = std::byte{1};
  FrameHeader out;
  EXPECT_NE(decode_header(b, 1024, out).find("unknown protocol version 1 (this build speaks 2)"), std::string::npos);
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

// Feeds `bytes` in pieces of `step` bytes; returns the frames decoded, stops at a problem.
std::vector<Frame> decode_all(FrameDecoder& d, const std::vector<std::byte>& bytes, std::size_t step,
                              std::string& problem) {
  std::vector<Frame> out;
  std::size_t at = 0;
  while (at < bytes.size() && problem.empty()) {
    const std::size_t end = std::min(bytes.size(), at + step);
    while (at < end && problem.empty()) {
      Frame f;
      bool done = false;
      at += d.consume(std::span(bytes.data() + at, end - at), f, done, problem);
      if (done) out.push_back(std::move(f));
    }
  }
  return out;
}

TEST(FrameDecoder, FramesSplitAtEveryByteBoundaryDecodeTheSame) {
  std::vector<std::byte> stream;
  for (std::size_t n : {0u, 1u, 8u, 1000u}) {
    std::vector<std::byte> payload(n);
    std::iota(reinterpret_cast<unsigned char*>(payload.data()), reinterpret_cast<unsigned char*>(payload.data()) + n,
              static_cast<unsigned char>(n));
    const auto f = encode_frame(n == 8 ? FrameType::tag : FrameType::bytes, payload);
    stream.insert(stream.end(), f.begin(), f.end());
  }
  for (std::size_t step : {1u, 3u, 16u, 17u, 4096u}) {
    SCOPED_TRACE(step);
    FrameDecoder d(1u << 20);
    std::string problem;
    const auto frames = decode_all(d, stream, step, problem);
    EXPECT_EQ(problem, "");
    ASSERT_EQ(frames.size(), 4u);
    EXPECT_EQ(frames[3].payload.size(), 1000u);
    EXPECT_EQ(frames[3].payload[999], static_cast<std::byte>((1000 + 999) & 0xff));
    EXPECT_FALSE(d.mid_frame());
  }
}

TEST(FrameDecoder, MemoryFollowsTheBytesReceivedNotTheClaimedLength) {
  FrameDecoder d(16u << 20);
  FrameHeader h;
  h.length = 16u << 20;
  const auto hb = encode_header(h);
  std::vector<std::byte> some(hb.begin(), hb.end());
  some.resize(some.size() + 1000);
  Frame f;
  bool done = false;
  std::string problem;
  std::size_t used = 0;
  while (used < some.size()) used += d.consume(std::span(some.data() + used, some.size() - used), f, done, problem);
  EXPECT_FALSE(done);
  EXPECT_TRUE(d.mid_frame());
  EXPECT_EQ(d.progress(), "1000 of 16777216 payload bytes");
}

TEST(FrameDecoder, TheLimitAppliesToHeadersDecodedAfterIsSet) {
  FrameDecoder d(512);
  const auto big = encode_frame(FrameType::bytes, std::vector<std::byte>(600));
  std::string problem;
  decode_all(d, big, big.size(), problem);
  EXPECT_NE(problem.find("exceeds the maximum 512"), std::string::npos);
  FrameDecoder d2(512);
  d2.set_max_length(1024);
  problem.clear();
  EXPECT_EQ(decode_all(d2, big, big.size(), problem).size(), 1u);
  EXPECT_EQ(problem, "");
}

}  // namespace
}  // namespace hmc::detail
