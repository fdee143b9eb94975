#version 450
// The decode engine's pass partial; f16/bf16 (and f32) arrays through 16-bit storage. See decode_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS DA_PARTIAL
#define ELEM16 1
#include "decode_attention.glsl"
