#version 450
// flash_attention backward: dq by query block; f16/bf16 (and f32) arrays through 16-bit storage. See flash_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS FA_DQ
#define ELEM16 1
#include "flash_attention.glsl"
