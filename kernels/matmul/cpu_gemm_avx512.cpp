// The native GEMM built for avx512 (compile flags set in kernels/CMakeLists.txt).
#define EJK_GEMM_FN gemm_avx512
#define EJK_GEMM_LANES 16
#include "matmul/cpu_gemm.inc"
