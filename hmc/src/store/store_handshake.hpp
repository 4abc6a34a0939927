#pragma once
// The embedded store's mutual authentication, on security/auth.hpp's primitives:
//   client -> hello:     client nonce (32) | wants_auth (1)
//   server -> challenge: server nonce (32)
//   client -> proof:     HMAC(key, "hmc-store client" | server nonce | client nonce)
//   server -> welcome:   HMAC(key, "hmc-store server" | client nonce | server nonce), or reject (reason) and close
// The client proves first: a connection without the key never sees a MAC of the key to attack
// offline. Each side proves over the other's fresh nonce; distinct labels stop a reflected proof.
#include <span>

#include "hmc/session.hpp"
#include "hmc/store/store.hpp"
#include "security/auth.hpp"

namespace hmc::detail {

inline constexpr std::size_t kStoreHelloSize = 33;
inline constexpr std::size_t kStoreChallengeSize = 32;
inline constexpr std::size_t kStoreWelcomeSize = 32;

inline Mac store_server_proof(const AuthKey& key, const Nonce& client_nonce, const Nonce& server_nonce) {
  static const std::string label = "hmc-store server";
  return hmac_sha256(key, {as_bytes(label), client_nonce, server_nonce});
}

inline Mac store_client_proof(const AuthKey& key, const Nonce& server_nonce, const Nonce& client_nonce) {
  static const std::string label = "hmc-store client";
  return hmac_sha256(key, {as_bytes(label), server_nonce, client_nonce});
}

// A world's store proves the same key as its Session's control channel: a key set on the Session
// only is the store's too, and an opt-out on either side is an opt-out of both (as CtrlOptions).
inline void take_session_auth(StoreOptions& store, const SessionOptions& session) {
  if (store.auth_key.empty()) store.auth_key = session.auth_key;
  store.authenticate = store.authenticate && session.authenticate;
}

}  // namespace hmc::detail
