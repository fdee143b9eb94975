# Installs libejk for consumers: headers, the shared libraries, a CMake package giving ejk::ejk
# (find_package(ejk CONFIG)) and ejk::mpi (COMPONENTS mpi), and pkg-config files ejk and ejk-mpi. Every installed file names its folders
# relative to itself, so the installed tree can be moved. Included from lib/CMakeLists.txt.
include(CMakePackageConfigHelpers)

set(EJK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ejk)

install(TARGETS ejk EXPORT ejkTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# ejk/ring_attention.hpp declares what only a build with MPI defines.
set(EJK_HEADER_EXCLUDES)
if(NOT EJK_WITH_MPI)
  set(EJK_HEADER_EXCLUDES PATTERN ring_attention.hpp EXCLUDE)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/lib/include/ejk DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp" ${EJK_HEADER_EXCLUDES})
install(EXPORT ejkTargets NAMESPACE ejk:: DESTINATION ${EJK_CMAKE_DIR})
# ejk::mpi in an export set of its own, loaded only by find_package(ejk COMPONENTS mpi): a
# consumer of ejk::ejk never needs MPI.
if(EJK_WITH_MPI)
  install(TARGETS ejk_mpi EXPORT ejkMpiTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT ejkMpiTargets NAMESPACE ejk:: DESTINATION ${EJK_CMAKE_DIR})
endif()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ejkConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/package/ejkConfig.cmake
                              INSTALL_DESTINATION ${EJK_CMAKE_DIR})
# Before 1.0 a minor release may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/ejkConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/ejkConfig.cmake ${PROJECT_BINARY_DIR}/package/ejkConfigVersion.cmake
        DESTINATION ${EJK_CMAKE_DIR})

# pkg-config: the prefix is found from the .pc file's own folder (${pcfiledir}).
file(RELATIVE_PATH EJK_PC_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" EJK_PC_PREFIX "${EJK_PC_PREFIX}")
file(RELATIVE_PATH EJK_PC_LIBDIR ${CMAKE_INSTALL_PREFIX} ${CMAKE_INSTALL_FULL_LIBDIR})
file(RELATIVE_PATH EJK_PC_INCLUDEDIR ${CMAKE_INSTALL_PREFIX} ${CMAKE_INSTALL_FULL_INCLUDEDIR})
configure_file(${PROJECT_SOURCE_DIR}/cmake/ejk.pc.in ${PROJECT_BINARY_DIR}/package/ejk.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/ejk.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
# ejk-mpi.pc: ejk::mpi for pkg-config users, requiring MPI's own pkg-config module.
if(EJK_WITH_MPI)
  set(EJK_MPI_PC_REQUIRES "ejk = ${PROJECT_VERSION}")
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_search_module(EJK_MPI_PC QUIET ompi-c mpi-c mpich)
  endif()
  if(EJK_MPI_PC_FOUND)
    string(APPEND EJK_MPI_PC_REQUIRES ", ${EJK_MPI_PC_MODULE_NAME}")
  else()
    message(WARNING "ejk: no pkg-config module of MPI found; ejk-mpi.pc users add MPI's flags themselves")
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/ejk-mpi.pc.in ${PROJECT_BINARY_DIR}/package/ejk-mpi.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/package/ejk-mpi.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
