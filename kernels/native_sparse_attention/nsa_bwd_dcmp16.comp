#version 450
// native_sparse_attention, pass bwd_dcmp: f16/bf16 arrays through 16-bit storage. See nsa.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS NSA_BWD_DCMP
#define ELEM16 1
#include "nsa.glsl"
