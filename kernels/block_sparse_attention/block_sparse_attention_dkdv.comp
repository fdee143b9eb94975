#version 450
// block_sparse_attention, pass dkdv: f32 arrays. See block_sparse_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS BSA_DKDV
#define ELEM16 0
#include "block_sparse_attention.glsl"
