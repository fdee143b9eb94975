#version 450
// native_sparse_attention, pass bwd_clear: one module for every dtype. See nsa.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS NSA_BWD_CLEAR
#define ELEM16 0
#include "nsa.glsl"
