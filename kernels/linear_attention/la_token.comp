#version 450
// linear attention, kernel la_token: f32 arrays. See linear_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS LA_TOKEN
#define ELEM16 0
#include "linear_attention.glsl"
