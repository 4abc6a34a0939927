#include "security/auth.hpp"

#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "hmc/error.hpp"

namespace hmc::detail {
namespace {

constexpr std::size_t kMaxKeyFile = 4096;  // a key file is a short secret, never a large file

std::string errno_text(int e) { return std::strerror(e); }

std::string hex(const Nonce& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::byte b : bytes) {
    out += digits[std::to_integer<unsigned>(b) >> 4];
    out += digits[std::to_integer<unsigned>(b) & 15];
  }
  return out;
}

void make_private_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw InvalidConfigError("cannot create key directory " + dir + ": " + errno_text(errno));
}

// Writes a fresh key to a temporary file and links it into place: of two processes racing on first
// use, exactly one key wins and both read it.
void create_key_file(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash != std::string::npos && slash != 0) make_private_dir(path.substr(0, slash));
  const std::string tmp = path + ".tmp." + hex(random_nonce()).substr(0, 16);  // unique per thread too
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw InvalidConfigError("cannot create key file " + tmp + ": " + errno_text(errno));
  const std::string text = hex(random_nonce()) + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!written) {
    ::unlink(tmp.c_str());
    throw InvalidConfigError("cannot write key file " + tmp);
  }
  const int linked = ::link(tmp.c_str(), path.c_str());
  const int link_errno = errno;
  ::unlink(tmp.c_str());
  if (linked != 0 && link_errno != EEXIST)
    throw InvalidConfigError("cannot create key file " + path + ": " + errno_text(link_errno));
}

AuthKey trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return AuthKey(p, p + text.size());
}

AuthKey long_enough(AuthKey key, const std::string& origin) {
  if (key.size() < kMinKeyBytes)
    throw InvalidConfigError("the auth key from " + origin + " is " + std::to_string(key.size()) + " bytes: at least " +
                             std::to_string(kMinKeyBytes) +
                             " are needed (make one with: head -c 32 /dev/urandom | base64)");
  return key;
}

}  // namespace

std::string default_key_file() {
  if (const char* f = std::getenv("HMC_AUTH_KEY_FILE"); f != nullptr && *f != '\0') return f;
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0')
    throw InvalidConfigError("no HMC auth key: set HMC_AUTH_KEY, HMC_AUTH_KEY_FILE or HOME");
  return std::string(home) + "/.hmc/auth_key";
}

namespace {
// Whoever may write the key file's directory may swap the key for theirs: refused unless the
// directory is sticky (like /tmp, where others cannot replace our file).
void check_key_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return;  // the open below reports a missing directory
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw InvalidConfigError("key directory " + dir + " is writable by other users (mode " + mode +
                             "): they could replace the key (chmod 700 " + dir + ")");
  }
}
}  // namespace

AuthKey load_or_create_key_file(const std::string& path) {
  // O_NONBLOCK: a FIFO (or device) named as the key file must be refused below, not block the open.
  constexpr int kFlags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  int fd = ::open(path.c_str(), kFlags);
  if (fd < 0 && errno == ENOENT) {
    create_key_file(path);
    fd = ::open(path.c_str(), kFlags);
  }
  if (fd >= 0) {
    try {
      check_key_dir(path);
    } catch (...) {
      ::close(fd);
      throw;
    }
  }
  if (fd < 0) throw InvalidConfigError("cannot open key file " + path + ": " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InvalidConfigError("key file " + path + " is not a regular file");
  }
  // Like ssh: a secret others can read (or that another user owns) is no secret.
  if ((st.st_mode & 077) != 0 || st.st_uid != ::geteuid()) {
    ::close(fd);
    throw InvalidConfigError("key file " + path + " must be owned by this user with mode 0600 (chmod 600 " + path +
                             ")");
  }
  std::string text(kMaxKeyFile, '\0');
  const ssize_t n = ::read(fd, text.data(), text.size());
  ::close(fd);
  if (n < 0) throw InvalidConfigError("cannot read key file " + path);
  text.resize(static_cast<std::size_t>(n));
  AuthKey key = trimmed(std::move(text));
  if (key.empty()) throw InvalidConfigError("key file " + path + " is empty");
  return long_enough(std::move(key), "key file " + path);
}

AuthKey resolve_auth_key(const std::string& explicit_key, AuthKeyOrigin* origin, const char* option_name) {
  auto say = [&](std::string where) {
    if (origin != nullptr) origin->description = std::move(where);
  };
  if (!explicit_key.empty()) {
    say(option_name);
    return long_enough(trimmed(explicit_key), option_name);
  }
  if (const char* env = std::getenv("HMC_AUTH_KEY"); env != nullptr && *env != '\0') {
    say("HMC_AUTH_KEY");
    return long_enough(trimmed(env), "HMC_AUTH_KEY");
  }
  const std::string path = default_key_file();
  say("key file " + path);
  return load_or_create_key_file(path);
}

Nonce random_nonce() {
  Nonce n{};
  std::size_t got = 0;
  while (got < n.size()) {
    const ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(Status::ERROR, "getrandom failed: " + errno_text(errno));
    }
    got += static_cast<std::size_t>(r);
  }
  return n;
}

Mac hmac_sha256(std::span<const std::byte> key, std::initializer_list<std::span<const std::byte>> parts) {
  Mac out{};
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac != nullptr ? EVP_MAC_CTX_new(mac) : nullptr;
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  std::size_t len = 0;
  bool ok = ctx != nullptr &&
            EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) == 1;
  for (auto part : parts)
    ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(part.data()), part.size()) == 1;
  ok = ok && EVP_MAC_final(ctx, reinterpret_cast<unsigned char*>(out.data()), &len, out.size()) == 1 &&
       len == out.size();
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  if (!ok) throw Error(Status::ERROR, "HMAC-SHA256 failed");
  return out;
}

bool macs_equal(const Mac& a, const Mac& b) noexcept { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

}  // namespace hmc::detail
