#version 450
// mla_decode, pass combine: f16/bf16 arrays through 16-bit storage. See mla_decode.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS MLA_COMBINE
#define ELEM16 1
#include "mla_decode.glsl"
