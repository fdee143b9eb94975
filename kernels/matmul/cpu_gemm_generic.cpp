// The native GEMM built for generic (compile flags set in kernels/CMakeLists.txt).
#define EJK_GEMM_FN gemm_generic
#define EJK_GEMM_LANES 4
#include "matmul/cpu_gemm.inc"
