#version 450
// native_sparse_attention, pass pool: f32 arrays. See nsa.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS NSA_POOL
#define ELEM16 0
#include "nsa.glsl"
