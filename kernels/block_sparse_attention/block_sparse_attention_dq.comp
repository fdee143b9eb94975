#version 450
// block_sparse_attention, pass dq: f32 arrays. See block_sparse_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS BSA_DQ
#define ELEM16 0
#include "block_sparse_attention.glsl"
