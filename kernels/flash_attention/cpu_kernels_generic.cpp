// The CPU flash attention built for generic (compile flags set in lib/CMakeLists.txt).
#define EJK_FA_ISA generic
#define EJK_FA_LANES 4
#define EJK_FA_MR 6
#define EJK_FA_NV 2
#include "flash_attention/cpu_kernels.inc"
