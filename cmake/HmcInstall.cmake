# `cmake --install`: headers, the static libraries, the shared one, hmc_doctor (bin), a CMake package
# (find_package(hmc CONFIG) -> hmc::hmc, hmc::hmc_shared) and a pkg-config file (static). The static
# libraries need what they link (UCX, libibverbs, liburing, spdlog, Boost headers, OpenSSL, threads)
# again on the user's side, so the package finds those; never a GPU runtime (hmc opens it at run time).
include(CMakePackageConfigHelpers)

install(TARGETS hmc hmc_session hmc_transports hmc_core hmc_runtime hmc_asio hmc_shared EXPORT hmcTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY hmc/include/ runtime/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# hmc_doctor: what a host offers HMC, for hosts without Python (hmc/tools/).
install(TARGETS hmc_doctor RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(HMC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hmc)
install(EXPORT hmcTargets NAMESPACE hmc:: DESTINATION ${HMC_CMAKE_DIR})
configure_package_config_file(cmake/hmcConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/hmcConfig.cmake
                              INSTALL_DESTINATION ${HMC_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/hmcConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/hmcConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/hmcConfigVersion.cmake
        DESTINATION ${HMC_CMAKE_DIR})

# pkg-config: the compile definitions hmc_asio makes public, and every library in link order.
set(HMC_PC_DEFINES "-DBOOST_ASIO_SEPARATE_COMPILATION -DBOOST_ASIO_NO_DEPRECATED -DBOOST_ASIO_NO_TS_EXECUTORS")
set(HMC_PC_REQUIRES "ucx libibverbs spdlog libssl libcrypto")
if(HMC_ASIO_BACKEND STREQUAL "io_uring")
  string(APPEND HMC_PC_DEFINES " -DBOOST_ASIO_HAS_IO_URING -DBOOST_ASIO_DISABLE_EPOLL -DHMC_ASIO_IO_URING")
  string(APPEND HMC_PC_REQUIRES " liburing")
endif()
# No GPU runtime: hmc opens it with dlopen at run time (hmc/CMakeLists.txt).
set(HMC_PC_LIBS "")
if(CMAKE_DL_LIBS)
  string(APPEND HMC_PC_LIBS " -l${CMAKE_DL_LIBS}")
endif()
# Relocatable: the prefix is found from the .pc file's own place (cmake --install --prefix anywhere).
file(RELATIVE_PATH HMC_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
configure_file(cmake/hmc.pc.in ${CMAKE_CURRENT_BINARY_DIR}/hmc.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/hmc.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
