// What OpenCL C sources need whichever backend compiles them: an OpenCL driver, or the CUDA
// backend through its prelude (lib/src/backends/cuda/opencl_c_prelude.inc), which defines these
// first.
#ifndef EJK_LOCAL_ARG
// A kernel's __local pointer argument (a clc::LocalBytes at launch). OpenCL passes the group's
// local memory; on CUDA the parameter is unused and EJK_LOCAL_BIND, the kernel's first line,
// binds the name to the block's dynamic shared memory.
#define EJK_LOCAL_ARG(T, name) __local T* name
#define EJK_LOCAL_BIND(T, name)
#endif
