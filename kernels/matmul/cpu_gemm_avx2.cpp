// The native GEMM built for avx2 (compile flags set in kernels/CMakeLists.txt).
#define EJK_GEMM_FN gemm_avx2
#define EJK_GEMM_LANES 8
#include "matmul/cpu_gemm.inc"
