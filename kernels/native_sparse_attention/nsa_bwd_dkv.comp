#version 450
// native_sparse_attention, pass bwd_dkv: f32 arrays. See nsa.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS NSA_BWD_DKV
#define ELEM16 0
#include "nsa.glsl"
