#version 450
// The decode engine's pass partial; f32 arrays only, for devices without 16-bit storage. See decode_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS DA_PARTIAL
#define ELEM16 0
#include "decode_attention.glsl"
