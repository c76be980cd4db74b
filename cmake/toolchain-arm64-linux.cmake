# Cross-compiles waste for Linux arm64 (aarch64) on an x86_64 Debian host: `scripts/build arm64`
# passes this file. The compiler is Debian's g++-aarch64-linux-gnu (the same GCC 12 as the native
# build, so the same warnings); headers, libraries and CMake package files come from an arm64 root
# filesystem that scripts/bootstrap builds from Debian's own arm64 packages (mmdebstrap, outside the
# checkout), because Debian's multiarch libsimdjson-dev:arm64 cannot be installed beside the amd64
# one. That root is both the sysroot here and qemu's library root in scripts/emulate, so a test
# runs against exactly the libraries it linked.
#
# Debian's cross GCC puts its own libc and libstdc++ (/usr/aarch64-linux-gnu, from
# libc6-dev-arm64-cross and libstdc++-12-dev-arm64-cross) ahead of the sysroot's: the same glibc
# 2.36 and GCC 12.2 as the root's, whose later point releases the programs then run on. clang 14
# (--target=aarch64-linux-gnu --sysroot, -fuse-ld=lld) also builds against the root alone, in the
# same time; GCC is used because the native release build is GCC. A cross compile takes about 15%
# more CPU time than the same native one.
#
# The root is $WASTE_ARM64_ROOT, else ${XDG_CACHE_HOME:-$HOME/.cache}/waste/arm64-root (where
# scripts/bootstrap --arm64 puts it). Executables that CMake runs at build time (GoogleTest's test
# discovery, ctest) go through scripts/emulate, so they run under qemu-aarch64.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
# Lets find_package and find_library look in the root's lib/aarch64-linux-gnu (CMake cannot infer
# the multiarch name from a cross compiler's implicit directories).
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

if(DEFINED ENV{WASTE_ARM64_ROOT} AND NOT "$ENV{WASTE_ARM64_ROOT}" STREQUAL "")
  set(WASTE_ARM64_ROOT "$ENV{WASTE_ARM64_ROOT}")
elseif(DEFINED ENV{XDG_CACHE_HOME} AND NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
  set(WASTE_ARM64_ROOT "$ENV{XDG_CACHE_HOME}/waste/arm64-root")
else()
  set(WASTE_ARM64_ROOT "$ENV{HOME}/.cache/waste/arm64-root")
endif()
if(NOT EXISTS "${WASTE_ARM64_ROOT}/usr/include/simdjson.h")
  message(FATAL_ERROR "toolchain-arm64-linux: no arm64 root filesystem at ${WASTE_ARM64_ROOT} "
                      "(run scripts/bootstrap --arm64, or set WASTE_ARM64_ROOT)")
endif()

find_program(WASTE_ARM64_CXX aarch64-linux-gnu-g++)
find_program(WASTE_ARM64_CC aarch64-linux-gnu-gcc)
if(NOT WASTE_ARM64_CXX OR NOT WASTE_ARM64_CC)
  message(FATAL_ERROR "toolchain-arm64-linux: no aarch64-linux-gnu-g++ "
                      "(Debian's g++-aarch64-linux-gnu; run scripts/bootstrap --arm64)")
endif()
set(CMAKE_C_COMPILER "${WASTE_ARM64_CC}")
set(CMAKE_CXX_COMPILER "${WASTE_ARM64_CXX}")

set(CMAKE_SYSROOT "${WASTE_ARM64_ROOT}")
set(CMAKE_FIND_ROOT_PATH "${WASTE_ARM64_ROOT}")
# Programs (python3, protoc-like generators) are the host's; everything linked is the root's.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config, where a find module uses it, reads only the root's .pc files.
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${WASTE_ARM64_ROOT}")
set(ENV{PKG_CONFIG_LIBDIR}
    "${WASTE_ARM64_ROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${WASTE_ARM64_ROOT}/usr/share/pkgconfig")

get_filename_component(_waste_checkout "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
# The root is named to the emulator, not found again from $HOME: a program runs against the root
# it was linked with, even where a test gives the daemon a HOME or XDG_CACHE_HOME of its own.
set(CMAKE_CROSSCOMPILING_EMULATOR
    "/usr/bin/env;WASTE_ARM64_ROOT=${WASTE_ARM64_ROOT};${_waste_checkout}/scripts/emulate;arm64")
