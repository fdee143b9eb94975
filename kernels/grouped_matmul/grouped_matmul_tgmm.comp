#version 450
// grouped_matmul (tgmm): f32 arrays. See grouped_matmul.glsl.
#extension GL_GOOGLE_include_directive : require
#define TGMM 1
#define ELEM16 0
#include "grouped_matmul.glsl"
