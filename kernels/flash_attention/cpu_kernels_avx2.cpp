// The CPU flash attention built for avx2 (compile flags set in lib/CMakeLists.txt).
#define EJK_FA_ISA avx2
#define EJK_FA_LANES 8
#define EJK_FA_MR 6
#define EJK_FA_NV 2
#include "flash_attention/cpu_kernels.inc"
