// Key discovery, key-file rules and the HMAC primitive the handshakes are built on.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "hmc/error.hpp"
#include "security/auth.hpp"

namespace hmc::detail {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/hmc-auth-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<std::byte> bytes_of(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

std::string hex(const Mac& m) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (auto b : m) {
    out += d[std::to_integer<unsigned>(b) >> 4];
    out += d[std::to_integer<unsigned>(b) & 15];
  }
  return out;
}

TEST(Auth, HmacMatchesRfc4231TestCase2) {
  const auto key = bytes_of("Jefe");
  const auto data = bytes_of("what do ya want ");
  const auto more = bytes_of("for nothing?");
  // RFC 4231 test case 2, fed in two parts: the parts are concatenated.
  EXPECT_EQ(hex(hmac_sha256(key, {data, more})), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Auth, MacsCompareByValue) {
  const auto key = bytes_of("k");
  const Mac a = hmac_sha256(key, {bytes_of("x")});
  Mac b = a;
  EXPECT_TRUE(macs_equal(a, b));
  b[31] ^= std::byte{1};
  EXPECT_FALSE(macs_equal(a, b));
}

TEST(Auth, NoncesDiffer) { EXPECT_NE(random_nonce(), random_nonce()); }

TEST(Auth, ExplicitKeyWinsOverEnvironment) {
  ::setenv("HMC_AUTH_KEY", "the key from the environment", 1);
  AuthKeyOrigin origin;
  EXPECT_EQ(resolve_auth_key("the explicit test key\n", &origin), bytes_of("the explicit test key"));
  EXPECT_EQ(origin.description, "SessionOptions::auth_key");
  EXPECT_EQ(resolve_auth_key("", &origin), bytes_of("the key from the environment"));
  EXPECT_EQ(origin.description, "HMC_AUTH_KEY");
  ::unsetenv("HMC_AUTH_KEY");
}

// Each origin of a short key is refused with a message naming it, its length and the remedy.
void expect_too_short(const std::function<void()>& resolve, const std::string& origin, std::size_t bytes) {
  try {
    resolve();
    ADD_FAILURE() << "a " << bytes << "-byte key from " << origin << " was accepted";
  } catch (const InvalidConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the auth key from " + origin + " is " + std::to_string(bytes) + " bytes"), std::string::npos)
        << what;
    EXPECT_NE(what.find("at least 16"), std::string::npos) << what;
    EXPECT_NE(what.find("head -c 32 /dev/urandom"), std::string::npos) << what;
  }
}

TEST(Auth, ShortKeysAreRefusedFromEveryOrigin) {
  static_assert(kMinKeyBytes == 16);
  const std::string fifteen(kMinKeyBytes - 1, 'k');
  expect_too_short([&] { resolve_auth_key(fifteen + "\n"); }, "SessionOptions::auth_key", 15);
  expect_too_short([&] { resolve_auth_key("a", nullptr, "StoreOptions::auth_key"); }, "StoreOptions::auth_key", 1);
  expect_too_short([&] { resolve_auth_key(" \n"); }, "SessionOptions::auth_key", 0);  // all trailing whitespace
  ::setenv("HMC_AUTH_KEY", "short", 1);
  expect_too_short([&] { resolve_auth_key(""); }, "HMC_AUTH_KEY", 5);
  ::unsetenv("HMC_AUTH_KEY");
  TempDir dir;
  const std::string path = dir.path() + "/auth_key";
  std::ofstream(path) << fifteen << "\n";
  ::chmod(path.c_str(), 0600);
  expect_too_short([&] { load_or_create_key_file(path); }, "key file " + path, 15);
  ::setenv("HMC_AUTH_KEY_FILE", path.c_str(), 1);
  expect_too_short([&] { resolve_auth_key(""); }, "key file " + path, 15);
  ::unsetenv("HMC_AUTH_KEY_FILE");
}

TEST(Auth, KeysOfTheMinimumLengthAreAccepted) {
  const std::string sixteen(kMinKeyBytes, 'k');
  EXPECT_EQ(resolve_auth_key(sixteen + " \n"), bytes_of(sixteen));
  ::setenv("HMC_AUTH_KEY", sixteen.c_str(), 1);
  EXPECT_EQ(resolve_auth_key(""), bytes_of(sixteen));
  ::unsetenv("HMC_AUTH_KEY");
  TempDir dir;
  const std::string path = dir.path() + "/auth_key";
  std::ofstream(path) << sixteen << "\n";
  ::chmod(path.c_str(), 0600);
  EXPECT_EQ(load_or_create_key_file(path), bytes_of(sixteen));
}

TEST(Auth, KeyFileIsCreatedPrivateOnFirstUseAndReused) {
  TempDir dir;
  const std::string path = dir.path() + "/sub/auth_key";
  ::unsetenv("HMC_AUTH_KEY");
  ::setenv("HMC_AUTH_KEY_FILE", path.c_str(), 1);
  AuthKeyOrigin origin;
  const AuthKey first = resolve_auth_key("", &origin);
  EXPECT_EQ(origin.description, "key file " + path);
  EXPECT_EQ(first.size(), 64u);  // 32 random bytes in hex
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir.path() + "/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(resolve_auth_key(""), first);
  ::unsetenv("HMC_AUTH_KEY_FILE");
}

TEST(Auth, ConcurrentFirstUseAgreesOnOneKey) {
  TempDir dir;
  const std::string path = dir.path() + "/auth_key";
  std::vector<AuthKey> keys(8);
  std::vector<std::thread> threads;
  for (auto& k : keys) threads.emplace_back([&k, &path] { k = load_or_create_key_file(path); });
  for (auto& t : threads) t.join();
  for (const auto& k : keys) EXPECT_EQ(k, keys.front());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator{}), 1);  // no temp files left
}

TEST(Auth, KeyFileReadableByOthersIsRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/auth_key";
  std::ofstream(path) << "a key file test secret\n";
  ::chmod(path.c_str(), 0644);
  try {
    load_or_create_key_file(path);
    FAIL() << "a world-readable key file was accepted";
  } catch (const InvalidConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("0600"), std::string::npos) << e.what();
  }
  ::chmod(path.c_str(), 0600);
  EXPECT_EQ(load_or_create_key_file(path), bytes_of("a key file test secret"));
}

TEST(Auth, EmptyKeyFileIsRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/auth_key";
  std::ofstream(path) << "\n";
  ::chmod(path.c_str(), 0600);
  EXPECT_THROW(load_or_create_key_file(path), InvalidConfigError);
}

TEST(Auth, SymlinkedKeyFileIsRefused) {
  TempDir dir;
  const std::string real = dir.path() + "/real";
  std::ofstream(real) << "a key file test secret\n";
  ::chmod(real.c_str(), 0600);
  fs::create_symlink(real, dir.path() + "/auth_key");
  EXPECT_THROW(load_or_create_key_file(dir.path() + "/auth_key"), InvalidConfigError);
}

// A FIFO named as the key file is refused at once: an open for reading would wait for a writer.
TEST(Auth, FifoKeyFileIsRefusedWithoutBlocking) {
  TempDir dir;
  const std::string path = dir.path() + "/auth_key";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto loading = std::async(std::launch::async, [&] { return load_or_create_key_file(path); });
  if (loading.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    std::ofstream(path) << "unblock\n";  // lets the blocked open return so the test can end
    loading.wait();
    FAIL() << "loading a FIFO key file blocked";
  }
  try {
    loading.get();
    FAIL() << "a FIFO key file was accepted";
  } catch (const InvalidConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}

TEST(Auth, KeyDirectoryWritableByOthersIsRefused) {
  TempDir dir;
  const std::string sub = dir.path() + "/hmc";
  ASSERT_EQ(::mkdir(sub.c_str(), 0700), 0);
  const std::string path = sub + "/auth_key";
  std::ofstream(path) << "a key file test secret\n";
  ::chmod(path.c_str(), 0600);
  ::chmod(sub.c_str(), 0777);
  try {
    load_or_create_key_file(path);
    FAIL() << "a key in a world-writable directory was accepted";
  } catch (const InvalidConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("chmod 700 " + sub), std::string::npos) << e.what();
  }
  ::chmod(sub.c_str(), 01777);  // sticky: others cannot replace our file
  EXPECT_EQ(load_or_create_key_file(path), bytes_of("a key file test secret"));
  ::chmod(sub.c_str(), 0700);
  EXPECT_EQ(load_or_create_key_file(path), bytes_of("a key file test secret"));
}

}  // namespace
}  // namespace hmc::detail
