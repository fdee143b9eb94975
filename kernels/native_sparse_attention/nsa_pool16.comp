#version 450
// native_sparse_attention, pass pool: f16/bf16 arrays through 16-bit storage. See nsa.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS NSA_POOL
#define ELEM16 1
#include "nsa.glsl"
