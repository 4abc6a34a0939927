#pragma once
// User memory registered with a Session: a put source or get destination without a staging copy.
// Move-only; unregisters when destroyed (after the operations using it are done). It must not be
// destroyed concurrently with its Session; once the Session is gone its destructor does nothing.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace hmc {

class Session;

class RegisteredMemory {
 public:
  RegisteredMemory() = default;
  RegisteredMemory(RegisteredMemory&& other) noexcept;
  RegisteredMemory& operator=(RegisteredMemory&& other) noexcept;
  RegisteredMemory(const RegisteredMemory&) = delete;
  RegisteredMemory& operator=(const RegisteredMemory&) = delete;
  ~RegisteredMemory();

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::uint64_t id() const noexcept { return id_; }
  explicit operator bool() const noexcept { return id_ != 0; }

 private:
  friend class Session;
  RegisteredMemory(Session* session, std::weak_ptr<int> session_alive, std::uint64_t id, void* data,
                   std::size_t size) noexcept;
  void reset() noexcept;

  Session* session_ = nullptr;
  std::weak_ptr<int> session_alive_;
  std::uint64_t id_ = 0;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace hmc
