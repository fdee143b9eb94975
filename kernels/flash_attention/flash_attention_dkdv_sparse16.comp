#version 450
// flash_attention backward: dk and dv walking a block layout's lists (block_sparse_attention); f16/bf16 (and
// f32) arrays through 16-bit storage. See flash_attention.glsl's SPARSE.
#extension GL_GOOGLE_include_directive : require
#define PASS FA_DKDV
#define ELEM16 1
#define SPARSE 1
#include "flash_attention.glsl"
