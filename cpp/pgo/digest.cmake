# The digest of the sources a build profile was trained on (cpp/pgo/sources.sha256): sha256
# over a listing with one line "<sha256 of the file>  <path>" per C++ source and header under
# cpp/ and for CMakeLists.txt, sorted by path. cpp/pgo/train.py computes the same in Python;
# tests/test_pgo_profile.py checks that the two agree.
#
# Included by CMakeLists.txt, which builds with the profile only where the digest matches
# (GCC given a profile of other code can fail with "corrupted profile info"), or run on its
# own to print the digest:  cmake -DROOT=<repository> -P cpp/pgo/digest.cmake

function(gramkiln_sources_digest root out_var files_var)
  file(GLOB_RECURSE _files RELATIVE "${root}" "${root}/cpp/*.cpp" "${root}/cpp/*.hpp"
       "${root}/cpp/*.h")
  list(APPEND _files CMakeLists.txt)
  list(SORT _files)
  set(_listing "")
  foreach(_file IN LISTS _files)
    file(SHA256 "${root}/${_file}" _hash)
    string(APPEND _listing "${_hash}  ${_file}\n")
  endforeach()
  string(SHA256 _digest "${_listing}")
  set(${out_var} "${_digest}" PARENT_SCOPE)
  list(TRANSFORM _files PREPEND "${root}/")
  set(${files_var} "${_files}" PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT DEFINED ROOT)
    message(FATAL_ERROR "usage: cmake -DROOT=<repository> -P cpp/pgo/digest.cmake")
  endif()
  gramkiln_sources_digest("${ROOT}" _digest _files)
  message("${_digest}")
endif()
