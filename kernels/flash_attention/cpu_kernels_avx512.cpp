// The CPU flash attention built for avx512 (compile flags set in lib/CMakeLists.txt).
#define EJK_FA_ISA avx512
#define EJK_FA_LANES 16
#define EJK_FA_MR 6
#define EJK_FA_NV 4
#include "flash_attention/cpu_kernels.inc"
