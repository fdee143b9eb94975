#version 450
// The cooperative-matrix backward dkdv pass walking a block layout's lists (block_sparse_attention).
// See flash_attention_bwd_coopmat.glsl and flash_attention.glsl's SPARSE.
#extension GL_GOOGLE_include_directive : require
#define PASS FA_DKDV_CM
#define SPARSE 1
#include "flash_attention_bwd_coopmat.glsl"
