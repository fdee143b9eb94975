#version 450
// block_sparse_attention, pass dq: f16/bf16 arrays through 16-bit storage. See block_sparse_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS BSA_DQ
#define ELEM16 1
#include "block_sparse_attention.glsl"
