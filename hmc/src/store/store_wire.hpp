#pragma once
// The embedded store's wire format: pure encode/decode functions, no I/O (the fuzz target).
//   frame:   magic u32 "HMS1" | type u8 | flags u8 (0) | reserved u16 (0) | id u32 | length u32 | payload
//   request: op u8, then per op (str = u32 length + bytes; numbers little-endian)
//            set: str key, str value          get: str key, u64 timeout_ms
//            wait/check: u32 n, n x str key, u64 timeout_ms
//            add: str key, i64 delta          compare_set: str key, str expected, str desired
//            erase: str key
//   reply:   u8 status (hmc::Status); SUCCESS: str value, i64 number, u8 flag; else: str message
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hmc/status.hpp"

namespace hmc::detail::store_wire {

inline constexpr std::uint32_t kMagic = 0x31534D48;  // bytes 'H' 'M' 'S' '1'
inline constexpr std::size_t kHeaderSize = 16;

enum class FrameType : std::uint8_t {
  hello = 1,      // client -> server: 32-byte client nonce, u8 wants_auth
  challenge = 2,  // server -> client: 32-byte server nonce + 32-byte server proof (or none without auth)
  proof = 3,      // client -> server: 32-byte client proof
  welcome = 4,    // server -> client: the handshake succeeded
  reject = 5,     // server -> client: UTF-8 reason, then close
  request = 6,
  reply = 7,
};

enum class Op : std::uint8_t { set = 1, get = 2, wait = 3, add = 4, compare_set = 5, erase = 6, check = 7 };

struct Header {
  FrameType type = FrameType::request;
  std::uint32_t id = 0;
  std::uint32_t length = 0;
};

// What a request may carry; anything larger is refused before it is stored.
struct Limits {
  std::size_t max_key = 4096;
  std::size_t max_value = std::size_t{16} << 20;
  std::size_t max_keys = 4096;  // keys in one wait/check
  // The largest frame a peer may announce: one value and its key, with room for the fields.
  std::uint32_t max_frame() const { return static_cast<std::uint32_t>(2 * max_value + 2 * max_key + 64); }
};

struct Request {
  Op op = Op::get;
  std::string key;
  std::vector<std::string> keys;  // wait, check
  std::string value;              // set: the value; compare_set: the desired value
  std::string expected;           // compare_set ("" matches a missing key)
  std::int64_t delta = 0;
  std::chrono::milliseconds timeout{0};  // get, wait
};

struct Reply {
  Status status = Status::SUCCESS;
  std::string value;        // get, compare_set: the value now stored; error: the message
  std::int64_t number = 0;  // add: the new value
  bool flag = false;        // erase: a key was removed; check: all keys exist; compare_set: it swapped
};

std::array<std::byte, kHeaderSize> encode_header(const Header& h);
// Empty when valid, else what is wrong (bad magic, unknown type, flags, length over max_length).
std::string decode_header(std::span<const std::byte> bytes, std::uint32_t max_length, Header& out);

std::vector<std::byte> encode_frame(FrameType type, std::uint32_t id, std::span<const std::byte> payload);

std::vector<std::byte> encode_request(const Request& r);
// Empty when the payload is one well-formed request within `limits`, else what is wrong.
std::string decode_request(std::span<const std::byte> payload, const Limits& limits, Request& out);

std::vector<std::byte> encode_reply(const Reply& r);
std::string decode_reply(std::span<const std::byte> payload, const Limits& limits, Reply& out);

// The longest wait a request may ask for: a day (a client repeats longer waits).
inline constexpr std::chrono::milliseconds kMaxWait{24LL * 3600 * 1000};

inline std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace hmc::detail::store_wire
