#version 450
// mean_pooling, pass pool: f32 arrays. See mean_pooling.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS POOL
#define ELEM16 0
#include "mean_pooling.glsl"
