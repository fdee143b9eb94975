#version 450
// flash_attention backward: dq by query block; f32 arrays only, for devices without 16-bit storage. See flash_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS FA_DQ
#define ELEM16 0
#include "flash_attention.glsl"
