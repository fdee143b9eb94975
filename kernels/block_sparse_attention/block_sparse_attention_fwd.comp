#version 450
// block_sparse_attention, pass fwd: f32 arrays. See block_sparse_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS BSA_FWD
#define ELEM16 0
#include "block_sparse_attention.glsl"
