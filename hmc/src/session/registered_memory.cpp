// Memory registered with a session, and the handle that unregisters it.
#include "hmc/registered_memory.hpp"

#include "hmc/error.hpp"
#include "hmc/session.hpp"
#include "session/session_impl.hpp"

namespace hmc {

RegisteredMemory Session::register_memory(void* data, std::size_t size, MemoryType type) {
  if (data == nullptr || size == 0) throw InvalidArgumentError("register_memory: null pointer or zero size");
  const std::uint64_t id = loop_->call([&] {
    if (impl_->closed || !impl_->transport) throw ClosedError("register_memory on a closed session");
    return impl_->transport->register_region(data, size, type);
  });
  return RegisteredMemory(this, alive_, id, data, size);
}

void Session::unregister_memory(std::uint64_t id) noexcept {
  try {
    loop_->call([&] {
      if (impl_->transport) impl_->transport->unregister_region(id);
    });
  } catch (const std::exception& e) {
    detail::log().warn("unregistering memory region {}: {}", id, e.what());
  }
}

RegisteredMemory::RegisteredMemory(Session* session, std::weak_ptr<int> session_alive, std::uint64_t id, void* data,
                                   std::size_t size) noexcept
    : session_(session), session_alive_(std::move(session_alive)), id_(id), data_(data), size_(size) {}

RegisteredMemory::RegisteredMemory(RegisteredMemory&& other) noexcept
    : session_(other.session_),
      session_alive_(std::move(other.session_alive_)),
      id_(other.id_),
      data_(other.data_),
      size_(other.size_) {
  other.id_ = 0;
}

RegisteredMemory& RegisteredMemory::operator=(RegisteredMemory&& other) noexcept {
  if (this != &other) {
    reset();
    session_ = other.session_;
    session_alive_ = std::move(other.session_alive_);
    id_ = other.id_;
    data_ = other.data_;
    size_ = other.size_;
    other.id_ = 0;
  }
  return *this;
}

RegisteredMemory::~RegisteredMemory() { reset(); }

void RegisteredMemory::reset() noexcept {
  if (id_ != 0 && session_alive_.lock()) session_->unregister_memory(id_);
  id_ = 0;
}

}  // namespace hmc
