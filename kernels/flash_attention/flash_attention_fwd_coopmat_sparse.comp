#version 450
// The cooperative-matrix forward walking a block layout's lists (block_sparse_attention). See
// flash_attention_fwd_coopmat.glsl and flash_attention.glsl's SPARSE.
#extension GL_GOOGLE_include_directive : require
#define SPARSE 1
#include "flash_attention_fwd_coopmat.glsl"
