#version 450
// native_sparse_attention, pass bwd_mark: one module for every dtype. See nsa.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS NSA_BWD_MARK
#define ELEM16 0
#include "nsa.glsl"
