#pragma once
// The GPU runtime calls HMC makes, written once over a runtime's traits (memory/cuda_api.hpp,
// memory/hip_api.hpp: its types, constants and entry-point names) and resolved at run time from its
// library (memory/runtime_library.hpp).
#include <cstddef>
#include <string>

#include "hmc/error.hpp"
#include "memory/runtime_library.hpp"

namespace hmc::detail {

// A runtime's names for the entry points of GpuApi, member for member.
struct GpuSymbols {
  const char* get_error_string;
  const char* get_error_name;
  const char* get_last_error;
  const char* get_device_count;
  const char* get_device;
  const char* set_device;
  const char* malloc;
  const char* free;
  const char* host_alloc;
  const char* free_host;
  const char* memcpy;
  const char* memcpy_async;
  const char* stream_create_with_flags;
  const char* stream_destroy;
  const char* stream_synchronize;
  const char* stream_add_callback;
};

template <class Runtime>
struct GpuApi {
  using Error = typename Runtime::Error;
  using Stream = typename Runtime::Stream;
  using MemcpyKind = typename Runtime::MemcpyKind;

  const char* (*get_error_string)(Error);
  const char* (*get_error_name)(Error);
  Error (*get_last_error)();
  Error (*get_device_count)(int*);
  Error (*get_device)(int*);
  Error (*set_device)(int);
  Error (*malloc)(void**, std::size_t);
  Error (*free)(void*);
  Error (*host_alloc)(void**, std::size_t, unsigned int);
  Error (*free_host)(void*);
  Error (*memcpy)(void*, const void*, std::size_t, MemcpyKind);
  Error (*memcpy_async)(void*, const void*, std::size_t, MemcpyKind, Stream);
  Error (*stream_create_with_flags)(Stream*, unsigned int);
  Error (*stream_destroy)(Stream);
  Error (*stream_synchronize)(Stream);
  Error (*stream_add_callback)(Stream, typename Runtime::StreamCallback, void*, unsigned int);
};

// Loaded once per process (each runtime's *_api.cpp); throws UnsupportedError (and retries on the
// next call) when it cannot be.
template <class Runtime>
const GpuApi<Runtime>& gpu_api();

// Every entry point of Runtime::symbols from the library at soname (else path); `what` names it in errors.
template <class Runtime>
GpuApi<Runtime> load_gpu_api(const char* what, const char* soname, const char* path) {
  void* lib = open_runtime_library(what, soname, path);
  constexpr const GpuSymbols& names = Runtime::symbols;
  GpuApi<Runtime> a{};
#define HMC_LOAD(fn) load_symbol(a.fn, lib, what, names.fn)
  HMC_LOAD(get_error_string);
  HMC_LOAD(get_error_name);
  HMC_LOAD(get_last_error);
  HMC_LOAD(get_device_count);
  HMC_LOAD(get_device);
  HMC_LOAD(set_device);
  HMC_LOAD(malloc);
  HMC_LOAD(free);
  HMC_LOAD(host_alloc);
  HMC_LOAD(free_host);
  HMC_LOAD(memcpy);
  HMC_LOAD(memcpy_async);
  HMC_LOAD(stream_create_with_flags);
  HMC_LOAD(stream_destroy);
  HMC_LOAD(stream_synchronize);
  HMC_LOAD(stream_add_callback);
#undef HMC_LOAD
  return a;
}

// `head` then `tail`, appended: GCC 12 -Warray-bounds misfires on std::string(head) + "...".
inline std::string gpu_text(const char* head, const std::string& tail) {
  std::string s = head;
  s += tail;
  return s;
}

template <class Runtime>
std::string describe_gpu_error(typename Runtime::Error e) {
  const std::string text = gpu_api<Runtime>().get_error_string(e), name = gpu_api<Runtime>().get_error_name(e);
  return text == name ? name : text + " (" + name + ")";  // HIP often returns the name as the text
}

// Clears the runtime's non-sticky last error so later calls start clean.
template <class Runtime>
void clear_gpu_error() noexcept {
  static_cast<void>(gpu_api<Runtime>().get_last_error());
}

// Throws Error naming `what` and the runtime's reason unless e is success.
template <class Runtime>
void check_gpu(typename Runtime::Error e, const std::string& what) {
  if (e == Runtime::success) return;
  clear_gpu_error<Runtime>();
  throw Error(Status::ERROR, what + ": " + describe_gpu_error<Runtime>(e));
}

}  // namespace hmc::detail
