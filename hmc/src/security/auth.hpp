#pragma once
// Shared-key authentication primitives: where the key comes from, nonces, HMAC-SHA256 proofs.
// The handshakes that use them (control channel, store) live with their protocols.
#include <array>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace hmc::detail {

using AuthKey = std::vector<std::byte>;
using Nonce = std::array<std::byte, 32>;
using Mac = std::array<std::byte, 32>;

// A key shorter than this (after trimming trailing whitespace) is guessable, not a secret: refused.
inline constexpr std::size_t kMinKeyBytes = 16;

// Where a key was found, for logs (never the key itself).
struct AuthKeyOrigin {
  std::string description;  // "SessionOptions::auth_key", "HMC_AUTH_KEY", "key file /home/u/.hmc/auth_key"
};

// The shared key: `explicit_key` if non-empty, else $HMC_AUTH_KEY, else the per-user key file
// ($HMC_AUTH_KEY_FILE, default $HOME/.hmc/auth_key), created with 32 random bytes and mode 0600 on
// first use. Throws InvalidConfigError when the file is readable by others or unreadable, or when the
// key is shorter than kMinKeyBytes. `option_name` names `explicit_key` in messages.
AuthKey resolve_auth_key(const std::string& explicit_key, AuthKeyOrigin* origin = nullptr,
                         const char* option_name = "SessionOptions::auth_key");

// The default key file path ($HMC_AUTH_KEY_FILE, else $HOME/.hmc/auth_key).
std::string default_key_file();

// Creates (if missing) and reads a key file; the same rules as resolve_auth_key.
AuthKey load_or_create_key_file(const std::string& path);

// 32 bytes from the kernel's CSPRNG; throws Error if it is unavailable.
Nonce random_nonce();

// HMAC-SHA256 over the concatenation of parts.
Mac hmac_sha256(std::span<const std::byte> key, std::initializer_list<std::span<const std::byte>> parts);

// Constant-time comparison.
bool macs_equal(const Mac& a, const Mac& b) noexcept;

// Byte view of a string literal or label.
inline std::span<const std::byte> as_bytes(const std::string& s) noexcept {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace hmc::detail
