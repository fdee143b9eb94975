# cmake -P script behind the test Library.exports (tests/CMakeLists.txt): the shared libraries
# export their public API (ejk/export.hpp) and none of their internals. Fails when a symbol of an
# internal namespace, or of a library libejk links privately, is in a dynamic symbol table: a
# missing hidden visibility, or an EJK_API on something internal.
# Inputs: NM (nm of the toolchain), LIBS (the libraries' files, ;-separated).
cmake_minimum_required(VERSION 3.25)
# Namespaces of lib/src and kernels/, and the private dependencies.
set(internal "ejk::(kernels|detail|tuning|select|backends|cpu|clc|opencl|vulkan|cuda|sqlite|mpi)::|fmt::|sqlite3_|yaml|CLI::")
foreach(lib IN LISTS LIBS)
  execute_process(COMMAND ${NM} -DC --defined-only ${lib} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} ${lib} failed (${rc}): ${err}")
  endif()
  # Matched on the whole text: demangled names hold brackets, which CMake lists do not split well.
  string(REGEX MATCHALL "\n" newlines "${out}")
  list(LENGTH newlines count)
  string(REGEX MATCHALL "[^\n]*(${internal})[^\n]*" leaked "${out}")
  message(STATUS "${lib}: ${count} dynamic symbols defined")
  if(NOT out MATCHES " ejk::")
    message(FATAL_ERROR "${lib} exports nothing of ejk: is EJK_API defined?")
  endif()
  if(leaked)
    list(LENGTH leaked n)
    list(JOIN leaked "\n  " shown)
    message(FATAL_ERROR "${lib} exports ${n} internal symbol(s):\n  ${shown}")
  endif()
endforeach()
