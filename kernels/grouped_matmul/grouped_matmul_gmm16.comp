#version 450
// grouped_matmul (gmm): f16/bf16 arrays through 16-bit storage. See grouped_matmul.glsl.
#extension GL_GOOGLE_include_directive : require
#define TGMM 0
#define ELEM16 1
#include "grouped_matmul.glsl"
