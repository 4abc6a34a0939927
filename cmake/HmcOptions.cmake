# Build options: every choice a user can make at configure time lives here.
option(HMC_BUILD_TESTS "Build the GoogleTest suite" ON)
# Off in scripts/test's sanitizer trees: no test runs the examples there (the normal build compiles them).
option(HMC_BUILD_EXAMPLES "Build the example programs in examples/" ON)
option(HMC_BUILD_PYTHON "Build the hmc Python package (pybind11, Debian python3)" ON)
# Debian's interpreter sees the python3-* packages; a pyenv python3 earlier on PATH does not.
if(NOT Python_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python_EXECUTABLE /usr/bin/python3)
endif()
# Off for users (pip install, plain cmake): a newer compiler's new warning must never fail an install;
# scripts/build.sh, and so CI, turns it on.
option(HMC_WERROR "Treat compiler warnings as errors" OFF)
option(HMC_SANITIZE "Build with AddressSanitizer + UndefinedBehaviorSanitizer" OFF)
option(HMC_TSAN "Build with ThreadSanitizer (alone: it cannot be combined with HMC_SANITIZE)" OFF)
option(HMC_FUZZ "Build the libFuzzer targets in tests/fuzz (clang only; scripts/fuzz runs them)" OFF)
option(HMC_ASIO_URING_CANCEL_FIX "Clear user_data on every io_uring SQE Asio 1.26 takes (upstream fix of Asio 1.27)" ON)
set(HMC_ASIO_BACKEND "io_uring" CACHE STRING "Asio reactor: io_uring or epoll")
set_property(CACHE HMC_ASIO_BACKEND PROPERTY STRINGS io_uring epoll)
set(HMC_ENABLE_CUDA "AUTO" CACHE STRING "CUDA memory backend: AUTO, ON or OFF")
set(HMC_ENABLE_HIP "AUTO" CACHE STRING "ROCm HIP memory backend: AUTO, ON or OFF")

# Warnings apply to HMC's own targets only, through this interface library.
add_library(hmc_warnings INTERFACE)
target_compile_options(hmc_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wold-style-cast
  -Wcast-align -Wunused -Woverloaded-virtual -Wformat=2
  $<$<BOOL:${HMC_WERROR}>:-Werror>)

if(HMC_SANITIZE AND HMC_TSAN)
  message(FATAL_ERROR "HMC_SANITIZE (ASan + UBSan) and HMC_TSAN (ThreadSanitizer) exclude each other: build twice")
endif()
if(HMC_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
if(HMC_TSAN)
  # -Wno-tsan: Asio's fenced blocks use std::atomic_thread_fence, which TSan does not model; the
  # scheduler's mutex, which it does model, is what hands operations between threads.
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -Wno-tsan)
  add_link_options(-fsanitize=thread)
endif()
