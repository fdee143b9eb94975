#version 450
// linear attention, kernel la_chunk: f16/bf16 arrays through 16-bit storage. See linear_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS LA_CHUNK
#define ELEM16 1
#include "linear_attention.glsl"
