# The floors (docs/ARCHITECTURE.md section 1), enforced by the compiler: no target sees the source
# root. Each library's include folder is a staging folder in the build tree holding links to
# exactly the headers of the source folders it owns, at the same root-relative paths the code
# includes them by, so a target sees the headers of what it links (PUBLIC, hence transitively) and
# an include across a missing link edge fails with "No such file or directory".

# waste_headers(<target> <PUBLIC|INTERFACE> <folder>...): stages the *.h of each folder (relative
# to the source root) for <target>. The globs are re-checked at every build, so a new header is
# staged and a removed one unstaged.
function(waste_headers target scope)
  set(stage ${CMAKE_BINARY_DIR}/include/${target})
  file(REMOVE_RECURSE ${stage})
  foreach(folder ${ARGN})
    file(GLOB headers RELATIVE ${CMAKE_SOURCE_DIR} CONFIGURE_DEPENDS
         ${CMAKE_SOURCE_DIR}/${folder}/*.h)
    file(MAKE_DIRECTORY ${stage}/${folder})
    foreach(header ${headers})
      file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${header} ${stage}/${header} SYMBOLIC)
    endforeach()
  endforeach()
  target_include_directories(${target} ${scope} ${stage})
endfunction()

# The CPU family the build targets (CMAKE_SYSTEM_PROCESSOR: uname -m natively, the toolchain
# file's when cross-compiling), which picks the family's sources below.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(WASTE_ARCH x86_64)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  set(WASTE_ARCH arm64)
else()
  message(FATAL_ERROR "waste builds for x86_64 and arm64 CPUs, not for CMAKE_SYSTEM_PROCESSOR "
                      "'${CMAKE_SYSTEM_PROCESSOR}'")
endif()

# The parts of a source's name that tie it to one OS or CPU family, each as a "_<part>" followed
# by "_" or ".cpp" (platform_linux_arm64.cpp has two): the platform layer's per-OS files
# (engine/base/platform.h) and the instruction-set files of each family, which only its compiler
# can build.
set(WASTE_NAME_PARTS_linux "linux")
set(WASTE_NAME_PARTS_macos "macos")
set(WASTE_NAME_PARTS_x86_64 "x86|avx[0-9a-z]*")
set(WASTE_NAME_PARTS_arm64 "arm64|neon|dotprod|i8mm")

# waste_target_sources(<list variable>): drops the sources named for another OS or CPU family.
function(waste_target_sources var)
  set(other "")
  if(NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
    list(APPEND other ${WASTE_NAME_PARTS_linux})
  endif()
  if(NOT APPLE)
    list(APPEND other ${WASTE_NAME_PARTS_macos})
  endif()
  foreach(arch x86_64 arm64)
    if(NOT arch STREQUAL WASTE_ARCH)
      list(APPEND other ${WASTE_NAME_PARTS_${arch}})
    endif()
  endforeach()
  list(JOIN other "|" other)
  set(kept "")
  foreach(src ${${var}})
    get_filename_component(name ${src} NAME)
    if(NOT name MATCHES "_(${other})(_[^.]*)?\\.cpp$")
      list(APPEND kept ${src})
    endif()
  endforeach()
  set(${var} ${kept} PARENT_SCOPE)
endfunction()

# waste_library(<target> FOLDERS <folder>... [LINKS <library>...]): a static library of the
# folders' *.cpp (those for the target OS and CPU family) that owns their headers and links
# (PUBLIC) only what it names.
function(waste_library target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "FOLDERS;LINKS")
  set(sources "")
  foreach(folder ${arg_FOLDERS})
    file(GLOB found CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${folder}/*.cpp)
    list(APPEND sources ${found})
  endforeach()
  waste_target_sources(sources)
  add_library(${target} STATIC ${sources})
  waste_headers(${target} PUBLIC ${arg_FOLDERS})
  target_link_libraries(${target} PUBLIC ${arg_LINKS})
endfunction()
