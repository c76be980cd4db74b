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

# waste_library(<target> FOLDERS <folder>... [LINKS <library>...]): a static library of the
# folders' *.cpp (those for the target OS) that owns their headers and links (PUBLIC) only what
# it names.
function(waste_library target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "FOLDERS;LINKS")
  set(sources "")
  foreach(folder ${arg_FOLDERS})
    file(GLOB found CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${folder}/*.cpp)
    list(APPEND sources ${found})
  endforeach()
  # A source named for an OS (the platform layer's, engine/base/platform.h) is built for it alone.
  if(NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
    list(FILTER sources EXCLUDE REGEX "_linux\\.cpp$")
  endif()
  if(NOT APPLE)
    list(FILTER sources EXCLUDE REGEX "_macos\\.cpp$")
  endif()
  # Likewise a source named for an instruction set, or for a CPU family (_x86, _arm64), for the
  # CPU family that has it.
  if(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    list(FILTER sources EXCLUDE REGEX "_(avx[^/]*|x86)\\.cpp$")
  endif()
  if(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
    list(FILTER sources EXCLUDE REGEX "_(neon|arm64)[^/]*\\.cpp$")
  endif()
  add_library(${target} STATIC ${sources})
  waste_headers(${target} PUBLIC ${arg_FOLDERS})
  target_link_libraries(${target} PUBLIC ${arg_LINKS})
endfunction()
