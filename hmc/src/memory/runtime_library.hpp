#pragma once
// A GPU vendor runtime (libcudart, libamdhip64) opened with dlopen on first use instead of linked:
// a program built against hmc needs no GPU toolkit, and a machine without one gets UnsupportedError.
namespace hmc::detail {

// Opens soname, else fallback_path (where the build found it), for the rest of the process; throws
// UnsupportedError naming `what` and both places when neither loads.
void* open_runtime_library(const char* what, const char* soname, const char* fallback_path);

// The entry point `name` in a library from open_runtime_library; throws UnsupportedError when it lacks it.
void* runtime_symbol(void* library, const char* what, const char* name);

template <class F>
void load_symbol(F& fn, void* library, const char* what, const char* name) {
  fn = reinterpret_cast<F>(runtime_symbol(library, what, name));
}

}  // namespace hmc::detail
