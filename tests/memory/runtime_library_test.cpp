// The GPU runtimes are opened at run time (memory/runtime_library.hpp): what a machine without one sees.
#include "memory/runtime_library.hpp"

#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "hmc/error.hpp"

namespace hmc::detail {
namespace {

TEST(RuntimeLibrary, AMissingLibraryIsUnsupportedNamingItAndWhereItWasLookedFor) {
  try {
    open_runtime_library("the test runtime", "libhmc_absent.so.7", "/nonexistent/lib/libhmc_absent.so.7");
    ADD_FAILURE() << "a library that does not exist was opened";
  } catch (const UnsupportedError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the test runtime"), std::string::npos) << what;
    EXPECT_NE(what.find("libhmc_absent.so.7"), std::string::npos) << what;
    EXPECT_NE(what.find("/nonexistent/lib/libhmc_absent.so.7"), std::string::npos) << what;
    EXPECT_NE(what.find("LD_LIBRARY_PATH"), std::string::npos) << what;
  }
}

TEST(RuntimeLibrary, TheFallbackPathOpensWhatTheSonameDoesNot) {
  void* lib = open_runtime_library("the C library", "libhmc_absent.so.7", "libc.so.6");
  using Getpid = pid_t (*)();
  Getpid fn = nullptr;
  load_symbol(fn, lib, "the C library", "getpid");
  EXPECT_EQ(fn(), ::getpid());
}

TEST(RuntimeLibrary, AMissingEntryPointIsUnsupportedNamingIt) {
  void* lib = open_runtime_library("the C library", "libc.so.6", "libc.so.6");
  try {
    runtime_symbol(lib, "the C library", "hmc_no_such_entry_point");
    ADD_FAILURE() << "an entry point that does not exist was found";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("hmc_no_such_entry_point"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hmc::detail
