#version 450
// mean_pooling, pass bwd: f16/bf16 arrays through 16-bit storage. See mean_pooling.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS BWD
#define ELEM16 1
#include "mean_pooling.glsl"
