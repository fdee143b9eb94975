# ejk_add_kernel(NAME): the kernel folder kernels/NAME joins libejk. By file name: *.cpp is host
# code (the kernel, its reference, its CPU implementation), opencl*.cpp (OpenCL C, run by the
# OpenCL and CUDA backends), cuda*.cpp, vulkan*.cpp and mpi*.cpp are built with their backend;
# *.cl and *.h are embedded for OpenCL C, *.cu and *.cuh for CUDA, *.comp compiled to SPIR-V
# (*_coopmat*.comp only where glslc takes cooperative matrices; what they include, *.glsl and
# common/ headers, is tracked through glslc's depfiles). Each file registers what it defines
# (kernels/common/builtin.hpp), so nothing else lists the kernel. Appends to the EJK_KERNEL_*
# lists of the caller's scope.
function(ejk_add_kernel name)
  set(dir ${EJK_KERNELS_DIR}/${name})
  if(NOT IS_DIRECTORY ${dir})
    message(FATAL_ERROR "ejk_add_kernel(${name}): no folder ${dir}")
  endif()
  file(GLOB all CONFIGURE_DEPENDS ${dir}/*.cpp)
  file(GLOB opencl CONFIGURE_DEPENDS ${dir}/opencl*.cpp)
  file(GLOB cuda CONFIGURE_DEPENDS ${dir}/cuda*.cpp)
  file(GLOB vulkan CONFIGURE_DEPENDS ${dir}/vulkan*.cpp)
  file(GLOB mpi CONFIGURE_DEPENDS ${dir}/mpi*.cpp)
  set(host ${all})
  foreach(backend_files IN ITEMS opencl cuda vulkan mpi)
    if(${backend_files})
      list(REMOVE_ITEM host ${${backend_files}})
    endif()
  endforeach()
  file(GLOB cl CONFIGURE_DEPENDS ${dir}/*.cl ${dir}/*.h)
  file(GLOB cu CONFIGURE_DEPENDS ${dir}/*.cu ${dir}/*.cuh)
  file(GLOB comp CONFIGURE_DEPENDS ${dir}/*.comp)
  file(GLOB coopmat CONFIGURE_DEPENDS ${dir}/*_coopmat*.comp)
  foreach(list IN ITEMS host opencl cuda vulkan mpi cl cu comp coopmat)
    string(TOUPPER ${list} upper)
    set(EJK_KERNEL_${upper} ${EJK_KERNEL_${upper}} ${${list}} PARENT_SCOPE)
  endforeach()
endfunction()
