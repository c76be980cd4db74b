# The C++ libraries waste links, in the form that matches the C++ standard library it is built
# against: GCC's libstdc++ (the release, asan, fuzz and arm64 flavours) or LLVM's libc++
# (`scripts/build clang`, and macOS, where libc++ is the only one).
#
# Debian compiles its C++ libraries against libstdc++. Code built against libc++ may not hand std::
# values to them: libc++ names its types std::__1::*, so a function taking a std::string links
# against nothing, and a type that holds one (std::string is 32 bytes in libstdc++, 24 in libc++)
# has two layouts. So under libc++ each dependency is used where its std:: types are compiled with
# ours:
# - fmt: header-only (FMT_HEADER_ONLY), from the same Debian headers; libfmt.so is not linked.
# - spdlog: header-only (no SPDLOG_COMPILED_LIB) over the header-only fmt; libspdlog.so is not
#   linked.
# - GoogleTest: compiled here from the sources Debian ships in /usr/src/googletest (package
#   googletest, which libgtest-dev depends on); WASTE_GTEST_SOURCE_DIR names another copy.
# - simdjson: Debian ships the amalgamated simdjson.h and libsimdjson.so but not simdjson.cpp, so
#   the library is linked as it is. What our code reaches of it takes no std:: type by value or
#   name: the DOM parser's inline code calls get_active_implementation() (a reference to
#   simdjson's own atomic pointer), minify(const char*, size_t, char*, size_t&), to_chars(char*,
#   const char*, double) and the error message table (plain C strings), and through the
#   implementation's vtable create_dom_parser_implementation(..., std::unique_ptr<T>&), the one
#   std:: type that crosses: a unique_ptr with the default deleter is one pointer in both
#   libraries. The implementation's name()/description() return libstdc++ strings; nothing here
#   calls them. The process then loads libstdc++ beside libc++ for simdjson alone.
# - ICU (the C API, unicode/uchar.h), OpenSSL, liburing, xxhash: C interfaces, the same either way.
# - Boost (Asio, Beast): header-only. Boost 1.74's Asio names std::result_of (removed from C++20;
#   libc++ drops it there) unless told the library has std::invoke_result, which it assumes only of
#   MSVC's; both libraries have had it since C++17, so waste::boost tells it so under either.
#
# The standard library is found out, not assumed: the compiler and its flags choose it
# (-stdlib=libc++ in scripts/build clang; the default on macOS).
#
# Defines waste::fmt, waste::spdlog and waste::boost (what every target links instead of fmt::fmt,
# spdlog::spdlog and Boost::headers) and, with WASTE_TESTS, GTest::gtest and GTest::gtest_main either way.
include(CheckCXXSourceCompiles)
check_cxx_source_compiles([[
#include <version>
#ifndef _LIBCPP_VERSION
#error "not libc++"
#endif
int main() { return 0; }
]] WASTE_LIBCXX)

add_library(waste_fmt INTERFACE)
add_library(waste::fmt ALIAS waste_fmt)
add_library(waste_spdlog INTERFACE)
add_library(waste::spdlog ALIAS waste_spdlog)
if(WASTE_LIBCXX)
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
  if(WASTE_LIBCXX)
    set(WASTE_GTEST_SOURCE_DIR /usr/src/googletest CACHE PATH
        "GoogleTest's sources, compiled here when building against libc++")
    if(NOT EXISTS ${WASTE_GTEST_SOURCE_DIR}/googletest/CMakeLists.txt)
      message(FATAL_ERROR "Building against libc++ needs GoogleTest's sources to compile with it: "
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
