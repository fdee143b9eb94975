#version 450
// mean_pooling, pass bwd: f32 arrays. See mean_pooling.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS BWD
#define ELEM16 0
#include "mean_pooling.glsl"
