# The C++ libraries waste links, in the form that matches the C++ standard library it is built
# against: GCC's libstdc++ (the release, asan, fuzz and arm64 flavours) or LLVM's libc++
# (`scripts/build clang`, and macOS, where libc++ is the only one).
#
# Debian compiles its C++ libraries against libstdc++. Code built against libc++ may not hand std::
# values to them: libc++ names its types std::__1::*, so a function taking a std::string links
# against nothing, and a type that holds one (std::string is 32 bytes in libstdc++, 24 in libc++)
# has two layouts. So with libc++ on Debian (WASTE_DEPS_OTHER_STDLIB) each dependency is used where
# its std:: types are compiled with ours:
# - fmt: header-only (FMT_HEADER_ONLY), from the same Debian headers; libfmt.so is not linked.
#   Debian ships no fmt sources to compile once, so every file that formats compiles fmt's
#   formatting code itself: about 2.5 s more CPU per such file at -O3 (0.6 s -> 3.1 s for a file
#   that only calls fmt::format), most of the clang flavour's extra build time.
# - spdlog: header-only (no SPDLOG_COMPILED_LIB) over the header-only fmt; libspdlog.so is not
#   linked. Only the few files that log pay for it (about 5 s more CPU each).
# - GoogleTest: compiled here from the sources Debian ships in /usr/src/googletest (package
#   googletest, which libgtest-dev depends on); WASTE_GTEST_SOURCE_DIR names another copy.
# - simdjson: Debian ships the amalgamated simdjson.h and libsimdjson.so but not simdjson.cpp, so
#   the library is linked as it is. What our code imports from it (nm -uC) names no std:: type:
#   get_active_implementation() (a reference to simdjson's own atomic pointer),
#   validate_utf8(const char*, size_t), to_chars(char*, const char*, double) and the table of
#   error messages (C strings). One std:: type crosses through the implementation's vtable: the
#   DOM parser's create_dom_parser_implementation(..., std::unique_ptr<T>&), a unique_ptr with the
#   default deleter, which is one pointer in both libraries. The implementation's name() and
#   description() return libstdc++ strings; nothing here calls them. The process then loads
#   libstdc++ beside libc++, for simdjson alone.
# - ICU (the C API, unicode/uchar.h), OpenSSL, liburing, xxhash: C interfaces, the same either way.
# - Boost (Asio, Beast): header-only. Boost 1.74's Asio names std::result_of (removed from C++20;
#   libc++ drops it there) unless told the library has std::invoke_result, which it assumes only of
#   MSVC's; both libraries have had it since C++17, so waste::boost tells it so under either.
#
# The standard library is found out, not assumed: the compiler and its flags choose it
# (-stdlib=libc++ in scripts/build clang; the default on macOS, whose Homebrew libraries are built
# against libc++ too, so there the compiled ones are linked).
#
# Defines waste::fmt, waste::spdlog and waste::boost (what every target links instead of fmt::fmt,
# spdlog::spdlog and Boost::headers) and, with WASTE_TESTS, GTest::gtest and GTest::gtest_main
# either way.
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_QUIET ON)
check_cxx_source_compiles([[
#include <version>
#ifndef _LIBCPP_VERSION
#error "not libc++"
#endif
int main() { return 0; }
]] WASTE_LIBCXX)
unset(CMAKE_REQUIRED_QUIET)
set(other_stdlib OFF)
if(WASTE_LIBCXX AND NOT APPLE)
  set(other_stdlib ON)
endif()
option(WASTE_DEPS_OTHER_STDLIB
       "Installed C++ libraries use another standard library: fmt, spdlog header-only; GoogleTest compiled here"
       ${other_stdlib})
if(WASTE_LIBCXX)
  message(STATUS "C++ standard library: libc++ (WASTE_DEPS_OTHER_STDLIB=${WASTE_DEPS_OTHER_STDLIB})")
endif()

add_library(waste_fmt INTERFACE)
add_library(waste::fmt ALIAS waste_fmt)
add_library(waste_spdlog INTERFACE)
add_library(waste::spdlog ALIAS waste_spdlog)
if(WASTE_DEPS_OTHER_STDLIB)
  target_link_libraries(waste_fmt INTERFACE fmt::fmt-header-only)
  # spdlog's own header-only target links the compiled fmt; this one links the header-only fmt.
  target_compile_definitions(waste_spdlog INTERFACE SPDLOG_FMT_EXTERNAL)
  target_include_directories(waste_spdlog SYSTEM INTERFACE
    $<TARGET_PROPERTY:spdlog::spdlog_header_only,INTERFACE_INCLUDE_DIRECTORIES>)
  target_link_libraries(waste_spdlog INTERFACE waste_fmt Threads::Threads)
else()
  target_link_libraries(waste_fmt INTERFACE fmt::fmt)
  target_link_libraries(waste_spdlog INTERFACE spdlog::spdlog)
endif()

add_library(waste_boost INTERFACE)
add_library(waste::boost ALIAS waste_boost)
target_link_libraries(waste_boost INTERFACE Boost::headers)
target_compile_definitions(waste_boost INTERFACE BOOST_ASIO_HAS_STD_INVOKE_RESULT=1)

if(WASTE_TESTS)
  if(WASTE_DEPS_OTHER_STDLIB)
    set(WASTE_GTEST_SOURCE_DIR /usr/src/googletest CACHE PATH
        "GoogleTest's sources, compiled here under WASTE_DEPS_OTHER_STDLIB")
    if(NOT EXISTS ${WASTE_GTEST_SOURCE_DIR}/googletest/CMakeLists.txt)
      message(FATAL_ERROR "WASTE_DEPS_OTHER_STDLIB needs GoogleTest's sources to compile: "
                          "none in WASTE_GTEST_SOURCE_DIR=${WASTE_GTEST_SOURCE_DIR} (Debian's "
                          "googletest package puts them in /usr/src/googletest)")
    endif()
    # Only the library (not gmock, not its own tests), its headers included as system headers so
    # our warning flags do not apply to them, and its sources compiled without warnings: they
    # are not ours to fix.
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory(${WASTE_GTEST_SOURCE_DIR}/googletest ${CMAKE_BINARY_DIR}/googletest
                     EXCLUDE_FROM_ALL SYSTEM)
    # (It names them GTest::gtest and GTest::gtest_main, as Debian's compiled package does.)
    target_compile_options(gtest PRIVATE -w)
    target_compile_options(gtest_main PRIVATE -w)
  else()
    find_package(GTest REQUIRED)
  endif()
endif()
