#define BF16 0
#include "common/clc.h"
#include "common/clc_mma.h"
// mma.sync m16n8k16 throughput: each warp runs ITERS rounds of 8 independent mma (no memory).
__kernel void peak(__global float* out, int iters) {
  float c[8][4];
  for (int i = 0; i < 8; ++i) for (int e = 0; e < 4; ++e) c[i][e] = 0.0f;
  uint a0 = get_local_id(0), a1 = a0 * 3u, a2 = a0 ^ 0x3c003c00u, a3 = a0 + 7u, b0 = a0 * 5u, b1 = a0 ^ 0x3c00u;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < 8; ++i) mma(c[i], a0, a1, a2, a3, b0, b1);
  }
  float s = 0.0f;
  for (int i = 0; i < 8; ++i) for (int e = 0; e < 4; ++e) s += c[i][e];
  out[get_global_id(0)] = s;
}
