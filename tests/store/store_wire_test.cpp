// The embedded store's wire format and the etcd backend's base64: round trips and hostile bytes.
#include <gtest/gtest.h>

#include "store/base64.hpp"
#include "store/store_wire.hpp"
#include "wire/byte_order.hpp"
#include "world/world_message.hpp"

namespace hmc::detail {
namespace {

namespace wire = store_wire;

wire::Request round_trip(const wire::Request& r) {
  wire::Request out;
  const auto bytes = wire::encode_request(r);
  EXPECT_EQ(wire::decode_request(bytes, wire::Limits{}, out), "");
  return out;
}

TEST(StoreWire, EveryRequestSurvivesARoundTrip) {
  wire::Request set{wire::Op::set, "job/k", {}, std::string("v\0alue", 6), {}, 0, {}};
  auto s = round_trip(set);
  EXPECT_EQ(s.op, wire::Op::set);
  EXPECT_EQ(s.key, "job/k");
  EXPECT_EQ(s.value, std::string("v\0alue", 6));

  wire::Request get{wire::Op::get, "k", {}, {}, {}, 0, std::chrono::milliseconds(1234)};
  EXPECT_EQ(round_trip(get).timeout.count(), 1234);

  wire::Request wait{wire::Op::wait, {}, {"a", "bb", "ccc"}, {}, {}, 0, std::chrono::milliseconds(7)};
  EXPECT_EQ(round_trip(wait).keys, (std::vector<std::string>{"a", "bb", "ccc"}));

  wire::Request add{wire::Op::add, "n", {}, {}, {}, -42, {}};
  EXPECT_EQ(round_trip(add).delta, -42);

  wire::Request cas{wire::Op::compare_set, "c", {}, "new", "old", 0, {}};
  auto c = round_trip(cas);
  EXPECT_EQ(c.expected, "old");
  EXPECT_EQ(c.value, "new");

  EXPECT_EQ(round_trip(wire::Request{wire::Op::erase, "e", {}, {}, {}, 0, {}}).key, "e");
}

TEST(StoreWire, RepliesSurviveARoundTrip) {
  wire::Reply ok;
  ok.value = "x";
  ok.number = -7;
  ok.flag = true;
  wire::Reply out;
  EXPECT_EQ(wire::decode_reply(wire::encode_reply(ok), wire::Limits{}, out), "");
  EXPECT_EQ(out.value, "x");
  EXPECT_EQ(out.number, -7);
  EXPECT_TRUE(out.flag);

  wire::Reply err;
  err.status = Status::TIMEOUT;
  err.value = "not set: k";
  EXPECT_EQ(wire::decode_reply(wire::encode_reply(err), wire::Limits{}, out), "");
  EXPECT_EQ(out.status, Status::TIMEOUT);
  EXPECT_EQ(out.value, "not set: k");
}

TEST(StoreWire, HostileRequestsAreRefusedWithAReason) {
  wire::Limits small;
  small.max_key = 8;
  small.max_value = 16;
  small.max_keys = 2;
  wire::Request out;
  auto refused = [&](std::vector<std::byte> bytes) { return !wire::decode_request(bytes, small, out).empty(); };
  EXPECT_TRUE(refused({}));               // nothing
  EXPECT_TRUE(refused({std::byte{0}}));   // op 0
  EXPECT_TRUE(refused({std::byte{99}}));  // unknown op
  auto set = wire::encode_request({wire::Op::set, "key", {}, "value", {}, 0, {}});
  EXPECT_FALSE(refused(set));
  set.pop_back();
  EXPECT_TRUE(refused(set));  // truncated value
  set = wire::encode_request({wire::Op::set, "key", {}, "value", {}, 0, {}});
  set.push_back(std::byte{0});
  EXPECT_TRUE(refused(set));  // trailing byte
  EXPECT_TRUE(refused(wire::encode_request({wire::Op::set, "a-too-long-key", {}, "v", {}, 0, {}})));
  EXPECT_TRUE(refused(wire::encode_request({wire::Op::set, "k", {}, std::string(17, 'v'), {}, 0, {}})));
  EXPECT_TRUE(refused(wire::encode_request({wire::Op::set, "", {}, "v", {}, 0, {}})));               // empty key
  EXPECT_TRUE(refused(wire::encode_request({wire::Op::wait, {}, {"a", "b", "c"}, {}, {}, 0, {}})));  // too many keys
  EXPECT_TRUE(refused(wire::encode_request({wire::Op::wait, {}, {}, {}, {}, 0, {}})));               // no keys
  // A length field claiming 4 GiB must not be believed (nor allocated).
  std::vector<std::byte> huge{std::byte{static_cast<std::uint8_t>(wire::Op::get)}, std::byte{0xff}, std::byte{0xff},
                              std::byte{0xff}, std::byte{0xff}};
  EXPECT_TRUE(refused(huge));
  // A wait longer than a day.
  auto get = wire::encode_request({wire::Op::get, "k", {}, {}, {}, 0, std::chrono::milliseconds(1)});
  store_le64(get.data() + get.size() - 8, ~std::uint64_t{0});
  EXPECT_TRUE(refused(get));
}

TEST(StoreWire, HeadersAreValidated) {
  wire::Header h;
  auto good = wire::encode_header({wire::FrameType::request, 9, 100});
  EXPECT_EQ(wire::decode_header(good, 1000, h), "");
  EXPECT_EQ(h.id, 9u);
  EXPECT_EQ(h.length, 100u);
  EXPECT_NE(wire::decode_header(good, 99, h), "");  // over the maximum
  auto bad = good;
  bad[0] = std::byte{'X'};
  EXPECT_NE(wire::decode_header(bad, 1000, h), "");  // magic
  bad = good;
  bad[4] = std::byte{42};
  EXPECT_NE(wire::decode_header(bad, 1000, h), "");  // type
  bad = good;
  bad[5] = std::byte{1};
  EXPECT_NE(wire::decode_header(bad, 1000, h), "");  // flags
  EXPECT_NE(wire::decode_header(std::span(good).first(15), 1000, h), "");
}

TEST(StoreWire, Base64MatchesTheStandardAndRejectsGarbage) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foob"), "Zm9vYg==");
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  std::string back;
  EXPECT_TRUE(base64_decode(base64_encode(all), back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(base64_decode("Zm9", back));       // length
  EXPECT_FALSE(base64_decode("Zm9*", back));      // alphabet
  EXPECT_FALSE(base64_decode("Z===", back));      // padding
  EXPECT_FALSE(base64_decode("Zg==Zg==", back));  // padding inside
  EXPECT_FALSE(base64_decode("Zh==", back));      // bits past the data
}

TEST(WorldMessage, RoundTripAndRejection) {
  WorldMessage m{WorldKind::notice, 0, 3, 77, 1, 2, 3, 4};
  std::string why;
  auto back = decode_world_message(encode(m), why);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->seq, 77u);
  EXPECT_EQ(back->d, 4u);
  auto bytes = encode(m);
  bytes[4] = std::byte{0};
  EXPECT_FALSE(decode_world_message(bytes, why));
  EXPECT_FALSE(decode_world_message(std::vector<std::byte>(8), why));  // a plain tag
  EXPECT_NE(why.find("not a collective"), std::string::npos);
  // An abort names a failure: success (0) and codes past the last status are no reason.
  for (std::uint8_t reason : {0, 14, 255}) {
    EXPECT_FALSE(decode_world_message(encode(WorldMessage{WorldKind::abort, reason, 0, 1, 0, 0, 0, 0}), why))
        << +reason;
  }
  EXPECT_TRUE(decode_world_message(encode(WorldMessage{WorldKind::abort, 9, 0, 1, 0, 0, 0, 0}), why));
  // An inline piece: exactly the announced bytes, only on a notice flagged inline.
  const std::vector<std::byte> piece(5, std::byte{7});
  WorldMessage n{WorldKind::notice, kInline, 0, 1, 0, piece.size(), 5, 0};
  std::span<const std::byte> got;
  const auto wire_bytes = encode(n, piece);  // `got` points into it
  ASSERT_TRUE(decode_world_message(wire_bytes, why, &got));
  EXPECT_TRUE(std::equal(got.begin(), got.end(), piece.begin(), piece.end()));
  n.b = 4;
  EXPECT_FALSE(decode_world_message(encode(n, piece), why));  // announces fewer bytes than it carries
  n.reason = 0;
  n.b = 5;
  EXPECT_FALSE(decode_world_message(encode(n, piece), why));  // bytes without the flag
  EXPECT_FALSE(decode_world_message(encode(n, std::vector<std::byte>(kMaxInline + 1)), why));
}

}  // namespace
}  // namespace hmc::detail
