# cmake -P script behind the package tests (tests/CMakeLists.txt). STEP is one of
#   install    install BUILD_DIR into WORK/staged, then move it to WORK/prefix: every later
#              step uses the moved tree, so a path compiled or written in at install time fails
#   cmake      build examples/ against WORK/prefix with find_package(ejk) and run it
#   pkgconfig  compile examples/pkgconfig_example.cpp with `c++ $(pkg-config --cflags --libs ejk)`
#              twice: with the mpi component (ring_attention_example too, where ejk has MPI) and
#              with MPI hidden from CMake, as on a machine without it (matmul_example alone)
# Inputs: STEP, WORK, BUILD_DIR, SOURCE_DIR, GENERATOR, CXX, LIBDIR (relative, as installed),
# WITH_MPI (whether ejk was built with MPI).
cmake_minimum_required(VERSION 3.25)
set(prefix ${WORK}/prefix)

function(run_checked what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

# The installed programs and examples get their own caches, never the user's.
set(env ${CMAKE_COMMAND} -E env EJK_CACHE_DIR=${WORK}/cache --unset=EJK_WORKER --unset=EJK_PROFILE_DIR)

if(STEP STREQUAL "install")
  file(REMOVE_RECURSE ${WORK})
  run_checked("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK}/staged)
  file(RENAME ${WORK}/staged ${prefix})
  foreach(f include/ejk/ejk.hpp bin/ejk bin/ejk-worker ${LIBDIR}/libejk.so ${LIBDIR}/pkgconfig/ejk.pc
            ${LIBDIR}/cmake/ejk/ejkConfig.cmake ${LIBDIR}/cmake/ejk/ejkConfigVersion.cmake
            ${LIBDIR}/cmake/ejk/ejkTargets.cmake)
    if(NOT EXISTS ${prefix}/${f})
      message(FATAL_ERROR "not installed: ${f}")
    endif()
  endforeach()
  if(WITH_MPI)
    foreach(f ${LIBDIR}/libejk_mpi.so ${LIBDIR}/pkgconfig/ejk-mpi.pc ${LIBDIR}/cmake/ejk/ejkMpiTargets.cmake
              include/ejk/ring_attention.hpp)
      if(NOT EXISTS ${prefix}/${f})
        message(FATAL_ERROR "not installed: ${f}")
      endif()
    endforeach()
  endif()
  # Nothing installed may point into the build or source tree, or at the prefix it was installed to.
  set(paths)
  foreach(p ${BUILD_DIR} ${SOURCE_DIR} ${WORK}/staged)
    foreach(c "\\" "." "+" "*" "?" "^" "$" "(" ")" "[" "]" "|")
      string(REPLACE "${c}" "\\${c}" p "${p}")
    endforeach()
    list(APPEND paths "${p}")
  endforeach()
  list(JOIN paths "|" paths)
  file(GLOB_RECURSE installed LIST_DIRECTORIES false ${prefix}/*)
  foreach(f IN LISTS installed)
    file(STRINGS ${f} lines REGEX "(${paths})")
    if(lines)
      list(GET lines 0 first)
      message(FATAL_ERROR "${f} names a path of the build machine: ${first}")
    endif()
  endforeach()
  # The installed program runs from the moved tree (its library found through its RPATH).
  run_checked("ejk kernels" ${env} ${prefix}/bin/ejk kernels)
  if(NOT output MATCHES "matmul" OR NOT output MATCHES "flash_attention")
    message(FATAL_ERROR "ejk kernels from the installed tree lists no kernels:\n${output}")
  endif()
  message("installed into ${prefix}")

elseif(STEP STREQUAL "cmake")
  # Open MPI refuses root unless told (CI runs as root); other MPIs ignore these.
  set(mpi_env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
  foreach(variant with-mpi without-mpi)
    set(build ${WORK}/example-build-${variant})
    file(REMOVE_RECURSE ${build})
    set(hide)
    if(variant STREQUAL "without-mpi")
      set(hide -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON)
    endif()
    # Only the installed tree may answer find_package: no package registry, no system ejk first.
    run_checked("configuring examples/ (${variant})" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${build}
                -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix}
                -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF ${hide})
    file(STRINGS ${build}/CMakeCache.txt found REGEX "^ejk_DIR:")
    if(NOT found STREQUAL "ejk_DIR:PATH=${prefix}/${LIBDIR}/cmake/ejk")
      message(FATAL_ERROR "find_package(ejk) did not find the installed tree: ${found}")
    endif()
    run_checked("building examples/ (${variant})" ${CMAKE_COMMAND} --build ${build})
    run_checked("matmul_example" ${env} ${build}/matmul_example)
    message("${output}")
    if(NOT output MATCHES "matmul 96x80x64 on cpu: relative error [^\n]*, tier [a-z_]+, config {"
       OR NOT output MATCHES "tuned in the worker: [1-9][0-9]* of [0-9]+ candidates measured, validated")
      message(FATAL_ERROR "unexpected output of matmul_example")
    endif()
    set(expect_ring FALSE)
    if(WITH_MPI AND variant STREQUAL "with-mpi")
      set(expect_ring TRUE)
    endif()
    if(expect_ring AND NOT EXISTS ${build}/ring_attention_example)
      message(FATAL_ERROR "find_package(ejk OPTIONAL_COMPONENTS mpi) gave no ejk::mpi")
    elseif(NOT expect_ring AND EXISTS ${build}/ring_attention_example)
      message(FATAL_ERROR "ring_attention_example was built ${variant}")
    endif()
    if(expect_ring)
      run_checked("ring_attention_example" ${env} ${mpi_env} ${build}/ring_attention_example)
      message("${output}")
      if(NOT output MATCHES "ring attention over 1 rank on cpu: largest difference from flash attention")
        message(FATAL_ERROR "unexpected output of ring_attention_example")
      endif()
    endif()
  endforeach()

elseif(STEP STREQUAL "pkgconfig")
  set(exe ${WORK}/pkgconfig_example)
  file(REMOVE ${exe})
  # pkg-config must find only this ejk.pc, whatever the environment says.
  set(pc ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${prefix}/${LIBDIR}/pkgconfig --unset=PKG_CONFIG_LIBDIR)
  run_checked("compiling with pkg-config" ${pc} sh -c
              "\"$0\" \"$1\" $(pkg-config --cflags --libs ejk) -Wl,-rpath,$(pkg-config --variable=libdir ejk) -o \"$2\""
              ${CXX} ${SOURCE_DIR}/examples/pkgconfig_example.cpp ${exe})
  run_checked("pkgconfig_example" ${env} ${exe})
  message("${output}")
  if(NOT output MATCHES "^ejk [0-9.]+: \\[\\[58, 64\\], \\[139, 154\\]\\]")
    message(FATAL_ERROR "unexpected output of pkgconfig_example")
  endif()

else()
  message(FATAL_ERROR "unknown STEP '${STEP}'")
endif()
