#include "memory/runtime_library.hpp"

#include <dlfcn.h>

#include <string>

#include "hmc/error.hpp"

namespace hmc::detail {

void* open_runtime_library(const char* what, const char* soname, const char* fallback_path) {
  if (void* lib = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL)) return lib;
  std::string why = ::dlerror();
  if (void* lib = ::dlopen(fallback_path, RTLD_NOW | RTLD_LOCAL)) return lib;
  throw UnsupportedError(std::string(what) + " could not be loaded (" + why + "; nor " + fallback_path +
                         "): install it, or add its directory to LD_LIBRARY_PATH");
}

void* runtime_symbol(void* library, const char* what, const char* name) {
  if (void* fn = ::dlsym(library, name)) return fn;
  throw UnsupportedError(std::string(what) + " lacks " + name + ": it is older than the one HMC was built with");
}

}  // namespace hmc::detail
