# One precompiled Asio header per kind of object code instead of one per target (docs/testing.md,
# "CI time"). hmc_runtime's header reaches every target that links it (target_precompile_headers
# PUBLIC); compiled once per target that was 23 copies of ~10 CPU-s each. With GCC the copies are
# shared: libraries and modules (-fPIC) reuse hmc_runtime's, executables (-fPIE, which a -fPIC
# header does not accept) reuse hmc_pch_exe's. -Winvalid-pch with -Werror turns any mismatch of
# flags into a build error. Other compilers (clang checks every -D) keep one header per target.
function(hmc_collect_targets out dir)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    hmc_collect_targets(sub_targets ${sub})
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(hmc_share_precompiled_headers)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    return()
  endif()
  # The executables' header needs a target compiled as they are; main() is all it has.
  file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/hmc_pch_exe.cpp CONTENT "int main() { return 0; }\n")
  add_executable(hmc_pch_exe ${CMAKE_BINARY_DIR}/hmc_pch_exe.cpp)
  target_link_libraries(hmc_pch_exe PRIVATE hmc_runtime hmc_warnings)
  hmc_collect_targets(targets ${PROJECT_SOURCE_DIR})
  foreach(target ${targets})
    get_target_property(libs ${target} LINK_LIBRARIES)
    if(target MATCHES "^(hmc_runtime|hmc_pch_exe)$" OR NOT ("hmc" IN_LIST libs OR "hmc_runtime" IN_LIST libs))
      continue()
    endif()
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      set_property(TARGET ${target} PROPERTY PRECOMPILE_HEADERS_REUSE_FROM hmc_pch_exe)
    else()
      set_property(TARGET ${target} PROPERTY PRECOMPILE_HEADERS_REUSE_FROM hmc_runtime)
    endif()
  endforeach()
endfunction()
