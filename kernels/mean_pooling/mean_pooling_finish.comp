#version 450
// mean_pooling, pass finish: f32 arrays. See mean_pooling.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS FINISH
#define ELEM16 0
#include "mean_pooling.glsl"
