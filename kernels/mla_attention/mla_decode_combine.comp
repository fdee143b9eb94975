#version 450
// mla_decode, pass combine: f32 arrays. See mla_decode.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS MLA_COMBINE
#define ELEM16 0
#include "mla_decode.glsl"
